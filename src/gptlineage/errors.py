"""The one exception type the command line turns into a clean error line.

Library code raises `GptlineageError("path/to/file: what is wrong")` for anything a user
can fix (bad input, bad flags, missing files). `gptlineage` prints it as one line,
`error: <command>: <message>`, exits 1 and shows no traceback. Any other exception is a
bug and keeps its traceback.
"""

import errno

WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # a full disk or quota, `ulimit -f`, a bad disk


class GptlineageError(Exception):
    """A user-facing error: the message is one line that names the file, key or flag."""
