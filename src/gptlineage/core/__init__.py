"""The base every layer stands on: errors, JSON, files, settings, CPUs, devices, progress.

Imports nothing else of the package. Example:
    from gptlineage.core.settings import from_args
"""
