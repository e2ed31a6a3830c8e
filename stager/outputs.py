# Moved to core.outputs (issue 44): kept until the parallel branches land, then removed.
from core.outputs import (MARK, WRITTEN_BY, OutputError, check_outputs, mark,  # noqa: F401
                          ours, run_directory)
