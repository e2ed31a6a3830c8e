"""``stager sbatch``: render an sbatch template (``slurm/*.sbatch``) or list them.

Pure text work, no MPI and no Slurm: ``stager sbatch stage-run-drain --set
nodes=4 ... -o job.sbatch && sbatch job.sbatch``.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from core.localfs import AtomicFile
from stager.sbatch import (TemplateError, find_templates, load_template, parse_assignments, render,
                           template_dirs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("template", nargs="?", metavar="TEMPLATE",
                        help="template name (see --list) or path to a template file")
    parser.add_argument("--set", dest="assignments", action="append", default=[],
                        metavar="KEY=VALUE", help="a parameter value (repeatable)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the batch script here (atomically) instead of stdout")
    parser.add_argument("--list", action="store_true",
                        help="list the templates and their parameters, then exit")
    parser.add_argument("--template-dir", action="append", default=None, metavar="DIR",
                        help="search DIR for templates instead of $STAGER_TEMPLATE_PATH "
                             "or the package's slurm/ (repeatable)")


def _list(dirs) -> int:
    templates = find_templates(dirs)
    if not templates:
        print(f"no templates found in {', '.join(template_dirs(dirs)) or '(no directory)'}",
              file=sys.stderr)
        return 2
    for t in templates:
        print(f"{t.name}  ({t.path})")
        for line in textwrap.wrap(t.description, 76):
            print(f"    {line}")
        for p in t.params:
            value = "required" if p.required else f"default {p.default!r}"
            print(f"    --set {p.name}=...  [{value}]  {p.help}")
        print()
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        if args.list:
            return _list(args.template_dir)
        if not args.template:
            print("stager sbatch: give a TEMPLATE (see 'stager sbatch --list')", file=sys.stderr)
            return 2
        params = parse_assignments(args.assignments)
        info, text = load_template(args.template, args.template_dir)
        script = render(text, params, where=info.path)
    except TemplateError as e:
        print(f"stager sbatch: {e}", file=sys.stderr)
        return 2
    if args.output:
        # temp + rename: a half-written batch script could be submitted by a concurrent
        # `sbatch`. Executable like a hand-written job script.
        try:
            with AtomicFile(os.path.abspath(args.output), mode=0o755, precheck=False) as f:
                f.write(script.encode())
                f.commit()
        except OSError as e:
            print(f"stager sbatch: cannot write {args.output}: {e.strerror}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(script)
    return 0
