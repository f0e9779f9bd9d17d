"""How a command is declared (registry), parsed (parser) and rebuilt from a manifest (command_line).

Example:
    from gptlineage.interface.registry import command
"""
