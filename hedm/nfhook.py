"""Staging hooks derived from an NF layer's parameter file: any frame names, no hook to write.

The shipped hooks (``hedm/hooks/nf.hook``, ``nffit.hook``) stage the demo's names;
a layer named otherwise gets its hooks, and the workflow line to go with them,
from its own parameter file::

    python -m hedm.nfhook LAYER/nf.params --stage 1 -o nf.hook
    python -m hedm.nfhook LAYER/nf.params --stage 2 --reduced REDUCED -o nffit.hook

Stage 1 stages the parameter file and exactly the frames it names
(:func:`hedm.nfparams.input_pattern`, numbers ``RawStartNr`` on: a glob would
take other layers' frames too), or the one GE/HDF5 file; stage 2 the parameter
file, stage 1's ``<ReducedFileName>_binary.npy``, ``GridFileName`` and
``SeedOrientations``. Under the destination (default ``${HEDM_STAGE}/%n/nf`` or
``/nffit``) each input lands at the path the parameter file gives relative to
its folder, so the staged file finds its neighbours; one named absolutely or
outside lands under a fixed name (``frames/``, ``reduced/``) and the printed line
carries the flag that points there (``--DataDirectory frames``). A
``DataDirectory`` holding ``%n`` is already node-local: not staged.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from hedm.common import is_series
from hedm.params import BINARY_SUFFIX, ParamError, relative_to
from core.errors import OutputError
from core.outputs import check_outputs

__all__ = ["stage1_hook", "stage2_hook", "hook_path", "main"]

DEST = {1: "${HEDM_STAGE}/%n/nf", 2: "${HEDM_STAGE}/%n/nffit"}


def hook_path(path: str) -> str:
    """``path`` as one literal hook-spec token: single quotes (nothing expands), glob
    characters bracketed; double quotes with escapes if it holds a single quote."""
    literal = "".join(f"[{c}]" if c in "*?[" else c for c in path)
    if "'" not in literal:
        return f"'{literal}'"
    escaped = "".join("\\" + c if c in '"\\$' else c for c in literal)
    return f'"{escaped}"'


def _inside(value: str) -> Optional[str]:
    """``value`` normalised if it is a relative path inside the parameter file's folder,
    else None."""
    if os.path.isabs(os.path.expanduser(value)):
        return None
    norm = os.path.normpath(value)
    if norm == ".." or norm.startswith(".." + os.sep):
        return None
    return "" if norm == "." else norm


def _dest(root: str, sub: str) -> str:
    return root.rstrip("/") + ("/" + sub if sub else "")


def _block(dest: str, paths: Sequence[str], comment: str) -> List[str]:
    return ([f"# {comment}", f"broadcast to {dest} files {{"]
            + [f"  {hook_path(p)}" for p in paths] + ["}"])


def _render(params_path: str, blocks: List[List[str]], flags: List[str], stage: int,
            dest: str) -> str:
    flow = {1: "hedm/nf.py", 2: "hedm/nffit.py"}[stage]
    header = [f"# NF-HEDM stage {stage}: generated from {os.path.abspath(params_path)}",
              "# by `python -m hedm.nfhook` (hedm/nfhook.py says what it stages and where).",
              "# Run with (HEDM_STAGE: node-local root, e.g. /dev/shm/$USER):",
              f"#   mpirun ... python -m workflows run {flow} --stage THIS_HOOK --out OUT -- \\",
              f"#     {' '.join(workflow_args(params_path, stage, flags, dest))}"]
    return "\n".join(header + [line for b in blocks for line in b]) + "\n"


def workflow_args(params_path: str, stage: int, flags: Sequence[str],
                  dest: Optional[str] = None) -> List[str]:
    """The flow arguments after ``--`` that read the staged parameter file."""
    root = (dest or DEST[stage]).replace("${HEDM_STAGE}", "$HEDM_STAGE")
    staged = _dest(root, os.path.basename(params_path))
    return [f'--params "{staged}"', *flags]


def stage1_hook(params_path: str, dest: str = DEST[1]) -> Tuple[str, List[str]]:
    """The stage-1 hook text for the layer file ``params_path`` and the flags its run
    needs (ParamError: invalid file, missing frames)."""
    from hedm.nfparams import read_nf_params

    p = read_nf_params(params_path)
    blocks = [_block(dest, [os.path.abspath(params_path)], "the layer's parameter file")]
    flags: List[str] = []
    if "%n" in p["DataDirectory"]:
        blocks.append(["# DataDirectory holds %n: the frames are node-local already"])
        return _render(params_path, blocks, flags, 1, dest), flags
    folder = relative_to(p["DataDirectory"], params_path)
    source = os.path.join(folder, p["InputPattern"])
    first, n = p["RawStartNr"], p["NrFilesPerDistance"] * p["nDistances"]
    if is_series(source):
        files = [os.path.normpath(source % k) for k in range(first, first + n)]
        what = (f"frames {first}..{first + n - 1} of {p['InputPattern']} "
                f"({p['nDistances']} distance(s) x {p['NrFilesPerDistance']})")
    else:
        files = [os.path.normpath(source)]
        what = f"the frames file {p['InputPattern']}"
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ParamError(f"{params_path}: {len(missing)} of {len(files)} frame files do not "
                         f"exist, first {missing[0]}; check DataDirectory, InputPattern (or "
                         "OrigFileName/extOrig), RawStartNr, NrFilesPerDistance, nDistances")
    sub = _inside(p["DataDirectory"])
    if sub is None:
        sub = "frames"
        flags.append(f"--DataDirectory {sub}")
    blocks.append(_block(_dest(dest, sub), files, what))
    return _render(params_path, blocks, flags, 1, dest), flags


def stage2_hook(params_path: str, reduced: Optional[str] = None,
                dest: str = DEST[2]) -> Tuple[str, List[str]]:
    """The stage-2 hook text for ``params_path`` (stage 1's output in ``reduced``, default
    ``ReducedDirectory``) and the flags its run needs (ParamError as stage 1)."""
    from hedm.nfparams import read_fit_params

    p = read_fit_params(params_path)
    flags: List[str] = []
    by_dir: Dict[str, List[str]] = {}
    whats: Dict[str, List[str]] = {}

    def add(sub: str, path: str, what: str) -> None:
        if not os.path.isfile(path):
            raise ParamError(f"{params_path}: {what} {path} does not exist")
        by_dir.setdefault(sub, []).append(path)
        whats.setdefault(sub, []).append(what)

    add("", os.path.abspath(params_path), "the layer's parameter file")
    folder = (os.path.abspath(reduced) if reduced
              else relative_to(p["ReducedDirectory"], params_path))
    sub = _inside(p["ReducedDirectory"])
    if sub is None:
        sub = "reduced"
        flags.append(f"--ReducedDirectory {sub}")
    add(sub, os.path.join(folder, p["ReducedFileName"] + BINARY_SUFFIX),
        "stage 1's binary images")
    for key, what in (("GridFileName", "the grid"), ("SeedOrientations", "the seeds")):
        inside = _inside(p[key])
        if inside is None:
            inside = os.path.basename(p[key])
            flags.append(f"--{key} {inside}")
        add(os.path.dirname(inside), relative_to(p[key], params_path), f"{what} ({key})")
    blocks = [_block(_dest(dest, sub), paths, ", ".join(whats[sub]))
              for sub, paths in by_dir.items()]
    return _render(params_path, blocks, flags, 2, dest), flags


def _written_here(path: str) -> bool:
    """Whether ``path`` is a hook this command wrote (its header, :func:`_render`)."""
    try:
        with open(path, errors="replace") as fh:
            return any(line.startswith("# by `python -m hedm.nfhook`")
                       for line in fh.read(4096).splitlines()[1:2])
    except OSError:
        return False


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hedm.nfhook PARAMS --stage 1|2 [--reduced DIR] [--dest ROOT] [-o HOOK]``."""
    parser = argparse.ArgumentParser(
        prog="python -m hedm.nfhook",
        description="write the staging hook of an NF-HEDM stage from the layer's parameter "
                    "file (hedm/nfhook.py)")
    parser.add_argument("params", help="the layer's parameter file")
    parser.add_argument("--stage", type=int, choices=(1, 2), required=True,
                        help="1: reduction (hedm/nf.py), 2: fitting (hedm/nffit.py)")
    parser.add_argument("--reduced", default=None, metavar="DIR",
                        help="stage 2: stage 1's output folder (its --out); default the "
                             "parameter file's ReducedDirectory")
    parser.add_argument("--dest", default=None, metavar="ROOT",
                        help="node-local destination (%%n = node name); default "
                             "${HEDM_STAGE}/%%n/nf (stage 1) or ${HEDM_STAGE}/%%n/nffit")
    parser.add_argument("-o", "--output", default=None, metavar="HOOK",
                        help="write the hook here (default: standard output)")
    parser.add_argument("--overwrite", action="store_true",
                        help="-o may replace a file this command did not write (never the "
                             "parameter file)")
    args = parser.parse_args(argv)
    dest = args.dest or DEST[args.stage]
    try:
        if args.stage == 1:
            if args.reduced:
                raise ParamError("--reduced is for --stage 2")
            text, flags = stage1_hook(args.params, dest)
        else:
            text, flags = stage2_hook(args.params, args.reduced, dest)
        if args.output:     # the one output rule (core.outputs); a hook it wrote is ours
            check_outputs([args.output], [args.params], hint="choose another -o",
                          overwrite=args.overwrite or _written_here(args.output))
    except (ParamError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    print("workflow arguments after --: "
          + " ".join(workflow_args(args.params, args.stage, flags, dest)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
