"""HEDM parameter files: MIDAS-like ``Key value`` lines, overridden by CLI flags, parsed strictly.

An unknown key (with the closest known one), a key given twice, a value of the wrong
type or out of range is a :class:`ParamError` naming ``FILE:LINE``, so a typo never runs
with a default; each stage skips the ``foreign`` keys others own (``docs/nf-files.md``,
"The layer's parameter file"). Precedence: ``--Key VALUE`` > the file > the schema's
default (:class:`Param` rows). Hand-written: MIDAS files have no sections and no ``=``.
"""

from __future__ import annotations

import argparse
import difflib
import os
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from hedm.errors import HedmError
from workflows.errors import WorkflowError

__all__ = ["BINARY_SUFFIX", "check_inputs", "ParamError", "Param", "Schema", "parse_params",
           "load_params", "add_param_flags", "add_flow_arguments", "flag_overrides",
           "resolve_params", "format_params", "MIDAS_NF_KEYS", "MIDAS_FF_KEYS"]

#: Every key MIDAS's NF-HEDM pipeline reads (marinerhemant/MIDAS at commit 0e6e0e54: the
#: keys of ``manuals/NF_Parameters_Reference.md`` and the ``str = "Key "`` comparisons of
#: ``NF_HEDM/src/*.c``), so a MIDAS parameter file is accepted whole; each stage checks the
#: keys it uses.
MIDAS_NF_KEYS = frozenset("""
BC BCTol BlanketSubtraction BoxSize DataDirectory Deblur Denoise DenoiseCheckpoint
DenoiseConfigFile DenoiseFinetune DenoiseMaskThreshold DenoiseMethod DenoiseNoMedian
DenoisePattern DenoiseTrainJointly DenoisedDirectory DistortionFile DoLoGFilter
EdgeLength EndNr ExcludePoleAngle GBAngle GaussFiltRadius GlobalPosition
GlobalPositionFirstLayer GridFileName GridMask GridPoints GridRefactor GridSize
Ice9Input LatticeConstant LatticeParameter LayerThickness LoGMaskRadius Lsd
LsdRelativeTol LsdTol MaxAngle MaxRingRad MedFiltRadius MicFileBinary MicFileText
MinConfidence MinFracAccept MinMisoNSaves NearestMisorientation NrFilesPerDistance
NrOrientations NrPixels NrPixelsY NrPixelsZ NumIterations NumPhases OmegaRange
OmegaStart OmegaStep OnlySpotsInfo OrientTol OrigFileName OutputDirectory PhaseNr
PrecomputedSpotsInfo RawStartNr ReducedFileName RingThresh RingsToUse Rsample SGNr
SaveNSolutions SaveReducedOutput SeedOrientations SeedOrientationsAll SimulationBatches
SkipImageBinning SpaceGroup StartNr StepSizeOrient TiltsTol TomoImage TomoPixelSize
WFImages Wavelength Wedge WriteFinImage WriteImage WriteLegacyBin extOrig extReduced
logDir nDistances p0 px resultFolder tx ty tz
""".split())

#: Every key MIDAS's FF-HEDM pipeline reads (marinerhemant/MIDAS at commit 0e6e0e54: the keys
#: of ``manuals/FF_Parameters_Reference.md``), so a MIDAS FF parameter file is accepted whole
#: by every FF stage; each stage checks the keys it uses.
MIDAS_FF_KEYS = frozenset("""
AdaptiveEtaBins AutoDetectPeaks BC BadPxFile BadPxIntensity BeamSize BeamThickness BgNSectors
BgSubtract BigDetSize BlanketSubtraction BoxSize Completeness ConvergenceThresholdPPM Dark
DataDirectory DataType Deblur DebugMode DetParams DiscArea DiscModel DistortionFile
DoDynamicReassignment DoLoGFilter DoPeakFit DoSmoothing DoubletSeparation EResolution EdgeLength
EndNr EtaBinSize EtaMax EtaMin Ext FileStem FitAllAtOnce FitOrWeightedMean FitParallax FitROIAuto
FitROIPadding FitWavelength FixPanelID Folder GBAngle GapFile GapIntensity GaussFiltRadius
GaussWidth GlobalPosition GradientCorrection GrainsFile GridFileName GridPoints GridSize Hbeam
HeadSize ImTransOpt InFileName InputAllExtraInfoFittingAll IntensitiesFile IsBinary IterOffset
L2Objective LatticeConstant LatticeParameter LoGMaskRadius LoadNr LocalMaximaOnly Lsd LsdMean
MargABC MargABG MargStrain MarginEta MarginOme MarginOmega MarginRadial MarginRadius MaskFile
MaxOmeSpotIDsToIndex MaxOutputIntensity MaxRingNumber MaxRingRad MedFiltRadius MinConfidence
MinEta ExcludePoleAngle MinFracAccept MinIndicesForFit MinIntegratedIntensity
MinMatchesToAcceptFrac MinNrSpots MinOmeSpotIDsToIndex MinPeakSNR MultFactor MultiplePeaks NFOutput
NPanelsY NPanelsZ NoSaveAll Normalize NormalizeRingWeights NrFilesPerDistance NrFilesPerSweep
OmegaFirstFile Distance StepsizePos OverallRingToIndex
NrOrientations NrPixels NrPixelsY NrPixelsZ NumPhases OmeBinSize OmegaEnd OmegaRange OmegaSigma
OmegaStart OmegaStep OmegaSumFrames OrientTol OutDirPath OutFileName OutlierIterations
OutputFolder OverAllRingToIndex Padding PanelGapsY PanelGapsZ PanelShiftsFile PanelSizeY
PanelSizeZ Parallax PeakFitMode PeakIntensity PeakLocation PerPanelDistortion PerPanelLsd PhaseNr
PolarizationCorrection PolarizationFraction QBinSize RBinDivisions RBinSize RMax RMin RawFolder
ReFitPeaks RefinementFileName RemoveOutliersBetweenIters ResidualCorrectionMap ResultFolder
ResumeFromCheckpoint RhoD RingDiagnosticsCSV RingNumbers RingRadii RingThresh RingsToExclude
RingsToUse Rsample SNIPIterations SaveIndividualFrames ScanStep SeedOrientations SimNoiseSigma
SimulationBatches SkipFrame SkipImageBinning SkipVerification SolidAngleCorrection SpaceGroup
StartFileNrFirstLayer StartNr StepSizeOrient StepsizeOrient StepSizePos SubPixelCardinalWidth
SubPixelLevel SumImages TakeGrainMax TopLayer TrimmedMeanFraction Twins UpdatedOrientations
UpperBoundThreshold UseFriedelPairs Vsample Wavelength Wedge WeightByFitSNR
WeightByPositionUncertainty WeightByRadius WeightFitRMSE WeightMask Width WriteImage
WriteLegacyBin WriteSpots YPixelSize darkDataset dataDataset lineoutRBinSize lineoutRMin
nDistances nIterations nScans num_lambda_samples p0 p1 p2 p3 p4 p5 p6 p7 p8 p9 p10 p11 p12 p13
p14 px resultFolder tGap tInt tolBC tolLsd tolLsdPanel tolP tolP0 tolP2Panel tolParallax
tolRotation tolShifts tolTiltX tolTilts tolWavelength tx txFit ty tz
""".split())


class ParamError(HedmError, WorkflowError):
    """A parameter file or flag is invalid (message starts with ``FILE:LINE:`` when it can)."""


@dataclass(frozen=True)
class Param:
    """One parameter: ``key`` (also ``--key``), ``type`` (int, float, str), ``default`` (None:
    required), ``help``, ``check(value) -> reason or None``, and ``multi`` (a tuple;
    repeated lines add up, as MIDAS's ``ImTransOpt``)."""

    key: str
    type: type
    default: Any
    help: str
    check: Optional[Callable[[Any], Optional[str]]] = None
    multi: bool = False

    def convert(self, text: str) -> Any:
        """Parse ``text`` to this parameter's type and check it; raise ValueError saying why
        (``multi``: a tuple of the line's values)."""
        text = text.strip()
        if not text:
            raise ValueError(f"{self.key} needs a value ({self.help})")
        if self.multi:
            one = Param(self.key, self.type, None, self.help, self.check)
            return tuple(one.convert(word) for word in text.replace(",", " ").split())
        if self.type in (int, float) and len(text.split()) > 1:
            raise ValueError(f"{self.key} takes one value, got {text!r}")
        if self.type is int:
            try:
                value: Any = int(text, 10)
            except ValueError:
                raise ValueError(f"{self.key} must be an integer, got {text!r}") from None
        elif self.type is float:
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{self.key} must be a number, got {text!r}") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"{self.key} must be a finite number, got {text!r}")
        else:
            value = text
        reason = self.check(value) if self.check else None
        if reason:
            raise ValueError(f"{self.key} {reason}, got {text!r}")
        return value


Schema = Tuple[Param, ...]


def at_least(lo: float) -> Callable[[Any], Optional[str]]:
    """A check: value >= ``lo``."""
    return lambda v: None if v >= lo else f"must be >= {lo}"


def one_of(*choices: Any) -> Callable[[Any], Optional[str]]:
    """A check: value is one of ``choices``."""
    return lambda v: None if v in choices else f"must be one of {', '.join(map(str, choices))}"


def positive(v: float) -> Optional[str]:
    """A check: value > 0."""
    return None if v > 0 else "must be > 0"


def fraction(v: float) -> Optional[str]:
    """A check: value in [0, 1]."""
    return None if 0 <= v <= 1 else "must be in [0, 1]"


def _unknown(key: str, schema: Schema, foreign: AbstractSet[str] = frozenset()) -> str:
    keys = [p.key for p in schema]
    # MIDAS keys are CamelCase; a wrong case is the common typo, then a near miss
    # (this stage's keys first: they are what a user of this stage types).
    close = []
    for pool in (keys, sorted(foreign)):
        close = [k for k in pool if k.lower() == key.lower()]
        close = close or difflib.get_close_matches(key, pool, n=1, cutoff=0.6)
        if close:
            break
    hint = f"did you mean {close[0]!r}? " if close else ""
    more = (" (and the keys of the other stages and of MIDAS's programs, "
            "hedm.params.MIDAS_NF_KEYS / MIDAS_FF_KEYS)") if foreign else ""
    return (f"unknown parameter {key!r}: {hint}known parameters: {', '.join(sorted(keys))}"
            f"{more}")


def parse_params(text: str, schema: Schema, path: str = "<string>",
                 foreign: AbstractSet[str] = frozenset()) -> Dict[str, Any]:
    """Parse parameter-file text into ``{key: value}`` for the keys it sets (no defaults);
    lines of ``foreign`` keys are skipped. ParamError ``PATH:LINE: reason``."""
    params = {p.key: p for p in schema}
    seen: Dict[str, int] = {}
    values: Dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        key, rest = parts[0], parts[1] if len(parts) > 1 else ""
        where = f"{path}:{lineno}"
        param = params.get(key)
        if param is None and key in foreign:
            continue
        if param is None:
            raise ParamError(f"{where}: {_unknown(key, schema, foreign)}")
        if key in seen and not param.multi:
            raise ParamError(
                f"{where}: {key} is already set on line {seen[key]}; give each parameter once"
            )
        try:
            value = param.convert(rest)
        except ValueError as exc:
            raise ParamError(f"{where}: {exc}") from None
        values[key] = values[key] + value if key in seen else value   # multi: they add up
        seen.setdefault(key, lineno)
    return values


def load_params(path: str, schema: Schema,
                foreign: AbstractSet[str] = frozenset()) -> Dict[str, Any]:
    """Read and parse the parameter file ``path`` (as :func:`parse_params`); ParamError
    when it cannot be read or a line is invalid."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ParamError(f"{path}: cannot read the parameter file: {exc}") from exc
    return parse_params(text, schema, path, foreign)


def check_inputs(paths: Sequence[str], keys: str) -> None:
    """Every one of ``paths`` (``%n``: this node) is a file here, else a ``ParamError``
    naming how many are missing, the first, and the parameter ``keys`` to check."""
    from workflows import on_this_node

    files = list(dict.fromkeys(on_this_node(p) for p in paths))
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ParamError(f"{len(missing)} of {len(files)} input file(s) missing on this node, "
                         f"first {missing[0]}; check {keys} or stage them (--stage SPEC)")


def add_flow_arguments(parser: argparse.ArgumentParser, kind: str, schema: Schema) -> None:
    """The options every HEDM workflow takes after ``--``: parameter file, node-local
    results directory, ``--no-drain``, and one ``--Key VALUE`` per parameter."""
    parser.add_argument("--params", required=True, metavar="FILE",
                        help=f"{kind} parameter file (%%n = node name, e.g. its staged copy)")
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="node-local results directory (%%n = node name); drained to --out "
                             "at the end. Default: write to --out directly")
    parser.add_argument("--no-drain", dest="drain", action="store_false",
                        help="leave the results in --results for a later `stager drain` "
                             "(as the stage-run-drain sbatch template does)")
    add_param_flags(parser, schema)


def add_param_flags(parser: argparse.ArgumentParser, schema: Schema) -> None:
    """Add ``--Key VALUE`` for every parameter (values stay text; see :func:`flag_overrides`)."""
    group = parser.add_argument_group("parameters (override the parameter file)")
    for p in schema:
        group.add_argument(
            f"--{p.key}",
            dest=f"param_{p.key}",
            metavar=p.type.__name__.upper(),
            default=None,
            help=p.help.replace("%", "%%"),  # argparse formats help with %
        )


def flag_overrides(ns: argparse.Namespace, schema: Schema) -> Dict[str, Any]:
    """The flags in ``ns``, converted and checked (ParamError ``--Key: reason``)."""
    out: Dict[str, Any] = {}
    for p in schema:
        text = getattr(ns, f"param_{p.key}", None)
        if text is None:
            continue
        try:
            out[p.key] = p.convert(str(text))
        except ValueError as exc:
            raise ParamError(f"--{p.key}: {exc}") from None
    return out


def resolve_params(
    schema: Schema,
    from_file: Mapping[str, Any],
    from_flags: Mapping[str, Any],
    path: str = "<flags>",
) -> Dict[str, Any]:
    """Every key's value by precedence flag > file > default (ParamError naming
    every missing required key)."""
    out: Dict[str, Any] = {}
    missing = []
    for p in schema:
        value = from_flags.get(p.key, from_file.get(p.key, p.default))
        if value is None:
            missing.append(f"{p.key} ({p.help})")
        out[p.key] = value
    if missing:
        raise ParamError(
            f"{path}: missing required parameter(s): {'; '.join(missing)}; "
            "add them to the parameter file or pass them as --Key VALUE"
        )
    return out


def format_params(values: Mapping[str, Any], schema: Sequence[Param]) -> str:
    """Render values as a parameter file (schema order), parseable by :func:`parse_params`."""
    width = max(len(p.key) for p in schema)
    lines = []
    for p in schema:
        value = values.get(p.key)
        if value is None or value == "" or (p.multi and not value):
            continue  # unset: a blank value would not parse back
        text = " ".join(map(str, value)) if p.multi else value
        lines.append(f"{p.key:<{width}}  {text}")
    return "\n".join(lines) + "\n"


def relative_to(path: str, base_file: str) -> str:
    """``path`` made absolute relative to the directory of ``base_file`` (``~`` expanded)."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return path
    return os.path.join(os.path.dirname(os.path.abspath(base_file)), path)


#: Suffix of stage 1's bit-packed binary images (``<ReducedFileName>_binary.npy``), the file
#: stage 2 reads (docs/nf-files.md); here so both NF stages name it without importing each other.
BINARY_SUFFIX = "_binary.npy"
