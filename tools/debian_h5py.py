"""Register Debian's parallel h5py under its PyPI name in a venv, so pip never shadows it.

Debian's ``python3-h5py-mpi`` registers as the distribution ``h5py.-debian-h5py-mpi``,
so pip sees no ``h5py`` and installs PyPI's serial build for any package that
declares ``h5py`` (hdf5plugin, stempy, LiberTEM), and that build shadows the MPI
one. This writes a minimal ``h5py-<version>.dist-info`` (no files of its own:
``import h5py`` still finds Debian's package through ``--system-site-packages``)
and a constraints file pinning ``h5py==<version>``, so pip treats the requirement
as met and refuses any upgrade instead of replacing the MPI build.

Usage: ``python tools/debian_h5py.py CONSTRAINTS_OUT`` with the venv's python.
"""
import os
import sys
import sysconfig


def main(out: str) -> None:
    import h5py

    if not h5py.__file__.startswith("/usr/lib/python3/dist-packages/"):
        sys.exit(f"h5py at {h5py.__file__} is not Debian's python3-h5py-mpi: remove it "
                 "from the venv (pip uninstall h5py) and run make setup again")
    v = h5py.__version__
    site = sysconfig.get_paths()["purelib"]
    d = os.path.join(site, f"h5py-{v}.dist-info")
    os.makedirs(d, exist_ok=True)
    files = {"METADATA": f"Metadata-Version: 2.1\nName: h5py\nVersion: {v}\n"
                         "Summary: Debian's python3-h5py-mpi, registered for pip "
                         "(tools/debian_h5py.py)\n",
             "INSTALLER": "debian\n", "RECORD": ""}
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    with open(out, "w") as f:
        f.write(f"h5py=={v}\n")


if __name__ == "__main__":
    main(sys.argv[1])
