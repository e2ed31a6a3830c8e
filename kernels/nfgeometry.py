"""NF-HEDM experiment geometry, read from a MIDAS parameter file.

The file format is MIDAS's (``manuals/NF_Analysis.md``, section 4;
``NF_HEDM/Example/ps_au.txt``): one ``Key value [value ...]`` per line,
``#`` starts a comment (also after the values), unknown keys are ignored
(MIDAS files carry keys for every stage).  Keys that MIDAS repeats are
lists, in file order: ``Lsd`` and ``BC`` (one line per detector distance),
``OmegaRange`` and ``BoxSize`` (one pair per omega range), ``RingsToUse``.

Units (MIDAS's): distances and sizes in micrometres (``Lsd``, ``px``,
``BoxSize``, ``GridSize``, ``Rsample``, ``MaxRingRad``), the beam centre in
pixels, angles in degrees (``Omega*``, ``ExcludePoleAngle``, ``OrientTol``,
tilts), the wavelength and lattice in Angstrom.

Where we are stricter than MIDAS (its C parser silently keeps the last of
repeated keys and leaves missing ones uninitialised): a missing required
key, a repeated single-valued key, a value that is not a number, counts
that disagree (``nDistances`` vs ``Lsd``/``BC`` lines, ``OmegaRange`` vs
``BoxSize`` lines) and a non-zero ``Wedge`` (not modelled) are errors that
name the file, the line and the key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from .errors import KernelArgumentError
from .hkl import HKLList, hkl_list, lattice_centring

__all__ = ["NFGeometry", "ParamFileError", "ModelArrays", "tilt_matrix"]


class ParamFileError(KernelArgumentError):
    """A parameter file (or text) is missing a key or has a bad value."""


# key -> (number of values, type, repeated?)
_KEYS: Dict[str, Tuple[int, type, bool]] = {
    "Lsd": (1, float, True), "BC": (2, float, True), "nDistances": (1, int, False),
    "px": (1, float, False), "NrPixels": (1, int, False), "NrPixelsY": (1, int, False),
    "NrPixelsZ": (1, int, False), "Wavelength": (1, float, False),
    "LatticeParameter": (6, float, False), "LatticeConstant": (6, float, False),
    "SpaceGroup": (1, int, False), "OmegaStart": (1, float, False),
    "OmegaStep": (1, float, False), "OmegaRange": (2, float, True),
    "BoxSize": (4, float, True), "ExcludePoleAngle": (1, float, False),
    "GridSize": (1, float, False), "EdgeLength": (1, float, False),
    "Rsample": (1, float, False), "OrientTol": (1, float, False),
    "MinFracAccept": (1, float, False), "MaxRingRad": (1, float, False),
    "tx": (1, float, False), "ty": (1, float, False), "tz": (1, float, False),
    "Wedge": (1, float, False), "RingsToUse": (1, int, True),
    "StartNr": (1, int, False), "EndNr": (1, int, False),
    "NrFilesPerDistance": (1, int, False),
}


def tilt_matrix(tx: float, ty: float, tz: float) -> np.ndarray:
    """MIDAS's ``RotationTilts``: ``Rz(tz) @ Ry(ty) @ Rx(tx)`` (degrees)."""
    a, b, c = (math.radians(v) for v in (tx, ty, tz))
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rz @ ry @ rx


class ModelArrays(NamedTuple):
    """The geometry as the flat arrays and scalars the numba kernels take.

    A ``typing.NamedTuple``, so numba passes it to ``@njit`` functions as one
    argument (see :mod:`kernels.nfmodel`).

    g : (n_hkl, 3) reciprocal vectors (1/A); gsin : (n_hkl,) ``|g| sin(theta)``;
    radius : (n_hkl,) ring radius at the first distance (um); ring : (n_hkl,) int64;
    omega_ranges : (m, 2) deg; boxes : (m, 4) um; lsd, ybc, zbc : (n_dist,);
    tilt : (3, 3) MIDAS's ``RotMatTilts``; p0 : (3,) its ``P0`` of the first distance;
    scalars: exclude_pole (deg), px (um), omega_start, omega_step (deg), n_frames,
    n_pixels_y, n_pixels_z.
    """

    g: np.ndarray
    gsin: np.ndarray
    radius: np.ndarray
    ring: np.ndarray
    omega_ranges: np.ndarray
    boxes: np.ndarray
    lsd: np.ndarray
    ybc: np.ndarray
    zbc: np.ndarray
    tilt: np.ndarray
    p0: np.ndarray
    exclude_pole: float
    px: float
    omega_start: float
    omega_step: float
    n_frames: int
    n_pixels_y: int
    n_pixels_z: int


@dataclass(frozen=True)
class NFGeometry:
    """Everything the NF forward model and fit need (a value: hashable and picklable).

    Distances are tuples, one entry per detector distance, the nearest first
    as MIDAS lists them.  Optional fields are ``None`` when the file does not
    give them; :meth:`require` names what a step needs.
    """

    lsd: Tuple[float, ...]
    ybc: Tuple[float, ...]
    zbc: Tuple[float, ...]
    px: float
    n_pixels_y: int
    n_pixels_z: int
    wavelength: float
    lattice_parameter: Tuple[float, ...]
    space_group: int
    omega_start: float
    omega_step: float
    n_frames: int
    omega_ranges: Tuple[Tuple[float, float], ...]
    box_sizes: Tuple[Tuple[float, float, float, float], ...]
    exclude_pole_angle: float = 0.0
    tilts: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    max_ring_rad: Optional[float] = None
    rings_to_use: Tuple[int, ...] = ()
    grid_size: Optional[float] = None
    edge_length: Optional[float] = None
    rsample: Optional[float] = None
    orient_tol: Optional[float] = None
    min_frac_accept: Optional[float] = None
    source: str = field(default="<NFGeometry>", compare=False)

    def __post_init__(self):
        def bad(msg):
            raise ParamFileError(f"{self.source}: {msg}")

        n = len(self.lsd)
        if n < 1 or len(self.ybc) != n or len(self.zbc) != n:
            bad(f"need one BC (y z) per Lsd; got {n} Lsd and {len(self.ybc)} BC")
        if any(not (math.isfinite(v) and v > 0) for v in self.lsd):
            bad(f"Lsd must be > 0 um, got {self.lsd}")
        for name in ("px", "wavelength"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                bad(f"{name} must be > 0, got {v}")
        if self.n_pixels_y < 1 or self.n_pixels_z < 1 or self.n_frames < 1:
            bad("NrPixelsY, NrPixelsZ and the number of frames must be >= 1, got "
                f"{self.n_pixels_y}, {self.n_pixels_z}, {self.n_frames}")
        if len(self.lattice_parameter) != 6:
            bad("LatticeParameter needs 6 values: a b c alpha beta gamma")
        a, b, c, al, be, ga = self.lattice_parameter
        if not (a > 0 and a == b == c and al == be == ga == 90):
            bad(f"only cubic lattices are supported (a = b = c, angles 90), got "
                f"{self.lattice_parameter}")
        try:
            lattice_centring(self.space_group)
        except KernelArgumentError as exc:
            bad(str(exc))
        if self.omega_step == 0 or not math.isfinite(self.omega_step):
            bad(f"OmegaStep must be a non-zero number, got {self.omega_step}")
        if not self.omega_ranges or len(self.omega_ranges) != len(self.box_sizes):
            bad(f"need one BoxSize per OmegaRange (at least one); got {len(self.omega_ranges)} "
                f"OmegaRange and {len(self.box_sizes)} BoxSize")
        for lo, hi in self.omega_ranges:
            if not lo < hi:
                bad(f"OmegaRange {lo} {hi}: the first value must be smaller")
        for box in self.box_sizes:
            if not (box[0] < box[1] and box[2] < box[3]):
                bad(f"BoxSize {box}: expected ymin < ymax and zmin < zmax (um)")
        if not 0 <= self.exclude_pole_angle < 90:
            bad(f"ExcludePoleAngle must be in [0, 90) degrees, got {self.exclude_pole_angle}")
        if self.max_ring_rad is not None and not self.max_ring_rad > 0:
            bad(f"MaxRingRad must be > 0 um, got {self.max_ring_rad}")
        for name in ("grid_size", "edge_length", "rsample", "orient_tol"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                bad(f"{name} must be > 0, got {v}")
        if self.min_frac_accept is not None and not 0 <= self.min_frac_accept <= 1:
            bad(f"MinFracAccept must be in [0, 1], got {self.min_frac_accept}")
        if self.rings_to_use:
            try:
                _ = self.hkls   # builds the list: RingsToUse must name rings it has
            except KernelArgumentError as exc:
                bad(str(exc))

    # -- derived ---------------------------------------------------------------------
    @property
    def n_distances(self) -> int:
        return len(self.lsd)

    @property
    def lattice_a(self) -> float:
        return float(self.lattice_parameter[0])

    @property
    def ring_cutoff(self) -> float:
        """MaxRingRad, or the farthest detector corner from the first beam centre (um)."""
        if self.max_ring_rad is not None:
            return float(self.max_ring_rad)
        ys = (0.0, float(self.n_pixels_y))
        zs = (0.0, float(self.n_pixels_z))
        return self.px * max(math.hypot(y - self.ybc[0], z - self.zbc[0]) for y in ys for z in zs)

    @cached_property
    def hkls(self) -> HKLList:
        """The reflections used (``RingsToUse`` applied), radii at the first distance."""
        full = hkl_list(self.lattice_a, self.wavelength, self.lsd[0], self.ring_cutoff,
                        self.space_group)
        return full.select_rings(self.rings_to_use) if self.rings_to_use else full

    @cached_property
    def arrays(self) -> ModelArrays:
        """The flat arrays of :class:`ModelArrays` (computed once per geometry)."""
        h = self.hkls
        tilt = tilt_matrix(*self.tilts)
        gnorm = np.linalg.norm(h.g, axis=1)
        return ModelArrays(
            g=np.ascontiguousarray(h.g), gsin=gnorm * np.sin(np.radians(h.theta)),
            radius=np.ascontiguousarray(h.radius), ring=h.ring.astype(np.int64),
            omega_ranges=np.array(self.omega_ranges, np.float64).reshape(-1, 2),
            boxes=np.array(self.box_sizes, np.float64).reshape(-1, 4),
            lsd=np.array(self.lsd, np.float64), ybc=np.array(self.ybc, np.float64),
            zbc=np.array(self.zbc, np.float64), tilt=tilt,
            p0=tilt @ np.array([-self.lsd[0], 0.0, 0.0]),
            exclude_pole=float(self.exclude_pole_angle), px=float(self.px),
            omega_start=float(self.omega_start), omega_step=float(self.omega_step),
            n_frames=int(self.n_frames), n_pixels_y=int(self.n_pixels_y),
            n_pixels_z=int(self.n_pixels_z))

    def require(self, *names: str, what: str = "this step") -> None:
        """Raise :class:`ParamFileError` naming every optional field in ``names`` left unset."""
        keys = {"grid_size": "GridSize", "edge_length": "EdgeLength", "rsample": "Rsample",
                "orient_tol": "OrientTol", "min_frac_accept": "MinFracAccept"}
        missing = [keys.get(n, n) for n in names if getattr(self, n) is None]
        if missing:
            raise ParamFileError(f"{self.source}: {what} needs {', '.join(missing)}; "
                                 "add the key(s) to the parameter file")

    def replace(self, **changes) -> NFGeometry:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return NFGeometry(**values)

    # -- parameter files ------------------------------------------------------------
    @classmethod
    def from_params(cls, path) -> NFGeometry:
        """Read a MIDAS-style NF parameter file (module docstring).

        Raises
        ------
        ParamFileError
            Naming the file, line and key of what is wrong or missing.
        """
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise ParamFileError(f"cannot read parameter file {path}: {exc.strerror}") from exc
        return cls.from_text(text, source=str(path))

    @classmethod
    def from_text(cls, text: str, source: str = "<text>") -> NFGeometry:
        """As :meth:`from_params`, from the file's text; ``source`` names it in errors."""
        values: Dict[str, List[tuple]] = {}
        lines: Dict[str, List[int]] = {}
        for lineno, raw in enumerate(text.splitlines(), 1):
            tokens = raw.split("#", 1)[0].split()
            if not tokens or tokens[0] not in _KEYS:
                continue
            key = tokens[0]
            count, typ, repeated = _KEYS[key]
            where = f"{source}, line {lineno}, {key}"
            if len(tokens) - 1 < count:
                raise ParamFileError(f"{where}: expected {count} value(s), got "
                                     f"{len(tokens) - 1}: {raw.strip()!r}")
            try:
                vals = tuple(_number(t, typ) for t in tokens[1:count + 1])
            except ValueError:
                raise ParamFileError(
                    f"{where}: expected {count} {typ.__name__} value(s), got "
                    f"{' '.join(tokens[1:count + 1])!r}") from None
            if not repeated and key in values:
                raise ParamFileError(f"{where}: {key} is given twice (first on line "
                                     f"{lines[key][0]}); keep one")
            values.setdefault(key, []).append(vals)
            lines.setdefault(key, []).append(lineno)
        return cls._from_values(values, lines, source)

    @classmethod
    def _from_values(cls, values, lines, source) -> NFGeometry:
        def one(key, default=None, required=True):
            if key in values:
                return values[key][0][0]
            if required and default is None:
                raise ParamFileError(f"{source}: missing required key {key}")
            return default

        def line_of(key):
            return f"{source}, line {lines[key][0]}, {key}"

        lsd = tuple(v[0] for v in values.get("Lsd", []))
        bcs = values.get("BC", [])
        if not lsd:
            raise ParamFileError(f"{source}: missing required key Lsd (one line per distance)")
        if not bcs:
            raise ParamFileError(f"{source}: missing required key BC (one 'BC y z' per Lsd)")
        if "nDistances" in values and values["nDistances"][0][0] != len(lsd):
            raise ParamFileError(f"{line_of('nDistances')}: says {values['nDistances'][0][0]} "
                                 f"distances but the file has {len(lsd)} Lsd lines")
        if len(bcs) != len(lsd):
            raise ParamFileError(f"{line_of('BC')}: {len(bcs)} BC lines for {len(lsd)} Lsd "
                                 "lines; give one 'BC y z' per distance, in the same order")
        ny = one("NrPixelsY", required=False)
        nz = one("NrPixelsZ", required=False)
        square = one("NrPixels", required=False)
        ny = ny if ny is not None else square
        nz = nz if nz is not None else square
        if ny is None or nz is None:
            raise ParamFileError(f"{source}: missing NrPixelsY/NrPixelsZ (or NrPixels)")
        n_frames = one("NrFilesPerDistance", required=False)
        if "StartNr" in values and "EndNr" in values:
            span = one("EndNr") - one("StartNr") + 1
            if n_frames is not None and n_frames != span:
                raise ParamFileError(f"{line_of('NrFilesPerDistance')}: {n_frames} frames but "
                                     f"StartNr..EndNr covers {span}")
            n_frames = span
        if n_frames is None:
            raise ParamFileError(f"{source}: missing the number of frames per distance "
                                 "(NrFilesPerDistance, or StartNr and EndNr)")
        lattice = values.get("LatticeParameter", values.get("LatticeConstant"))
        if lattice is None:
            raise ParamFileError(f"{source}: missing required key LatticeParameter")
        wedge = one("Wedge", 0.0, required=False)
        if wedge != 0:
            raise ParamFileError(f"{line_of('Wedge')}: Wedge {wedge} is not modelled; only 0 "
                                 "is supported")
        kwargs = dict(
            lsd=lsd, ybc=tuple(b[0] for b in bcs), zbc=tuple(b[1] for b in bcs),
            px=one("px"), n_pixels_y=ny, n_pixels_z=nz, wavelength=one("Wavelength"),
            lattice_parameter=lattice[0], space_group=one("SpaceGroup"),
            omega_start=one("OmegaStart"), omega_step=one("OmegaStep"), n_frames=n_frames,
            omega_ranges=tuple(values.get("OmegaRange", [])),
            box_sizes=tuple(values.get("BoxSize", [])),
            exclude_pole_angle=one("ExcludePoleAngle", 0.0, required=False),
            tilts=tuple(one(k, 0.0, required=False) for k in ("tx", "ty", "tz")),
            max_ring_rad=one("MaxRingRad", required=False),
            rings_to_use=tuple(v[0] for v in values.get("RingsToUse", [])),
            grid_size=one("GridSize", required=False),
            edge_length=one("EdgeLength", required=False),
            rsample=one("Rsample", required=False), orient_tol=one("OrientTol", required=False),
            min_frac_accept=one("MinFracAccept", required=False), source=source)
        if not kwargs["omega_ranges"]:
            raise ParamFileError(f"{source}: missing required key OmegaRange (e.g. "
                                 "'OmegaRange -180 180')")
        return cls(**kwargs)

    def to_params(self) -> str:
        """The geometry as MIDAS parameter-file text (:meth:`from_text` reads it back)."""
        out = [f"nDistances {self.n_distances}"]
        out += [f"Lsd {v!r}" for v in self.lsd]
        out += [f"BC {y!r} {z!r}" for y, z in zip(self.ybc, self.zbc)]
        out += [f"px {self.px!r}", f"NrPixelsY {self.n_pixels_y}",
                f"NrPixelsZ {self.n_pixels_z}", f"Wavelength {self.wavelength!r}",
                "LatticeParameter " + " ".join(repr(float(v)) for v in self.lattice_parameter),
                f"SpaceGroup {self.space_group}", f"OmegaStart {self.omega_start!r}",
                f"OmegaStep {self.omega_step!r}", f"NrFilesPerDistance {self.n_frames}"]
        out += [f"OmegaRange {lo!r} {hi!r}" for lo, hi in self.omega_ranges]
        out += ["BoxSize " + " ".join(repr(float(v)) for v in b) for b in self.box_sizes]
        out += [f"ExcludePoleAngle {self.exclude_pole_angle!r}"]
        out += [f"{k} {v!r}" for k, v in zip(("tx", "ty", "tz"), self.tilts)]
        out += [f"RingsToUse {r}" for r in self.rings_to_use]
        for key, name in (("MaxRingRad", "max_ring_rad"), ("GridSize", "grid_size"),
                          ("EdgeLength", "edge_length"), ("Rsample", "rsample"),
                          ("OrientTol", "orient_tol"), ("MinFracAccept", "min_frac_accept")):
            v = getattr(self, name)
            if v is not None:
                out.append(f"{key} {v!r}")
        return "\n".join(out) + "\n"


def _number(token: str, typ: type):
    if typ is int:
        f = float(token)
        if not f.is_integer():
            raise ValueError(token)
        return int(f)
    v = float(token)
    if not math.isfinite(v):
        raise ValueError(token)
    return v
