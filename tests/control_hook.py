"""An ``--on-ready`` hook for the tests: writes what it is given to $CONTROL_HOOK_OUT."""
import json
import os


def ready(info):
    with open(os.environ["CONTROL_HOOK_OUT"], "w") as f:
        json.dump(info, f)
