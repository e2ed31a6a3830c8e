"""``hedm.demo --seeds ff``: FF's grains become NF stage 2's seeds in a copy of the layer's
stage-2 files, the layer itself untouched (the full chain: tests/e2e/test_hedm_ff_nf_chain.py)."""
from __future__ import annotations

import numpy as np


def test_seeded_layer_holds_ffs_orientations_and_their_count(tmp_path):
    from hedm.demo_ff import _seeded_layer
    from hedm.nffit import read_seeds
    from kernels.crystal import random_orientations

    layer = tmp_path / "layer"
    layer.mkdir()
    params = "NrOrientations 13\nSeedOrientations seeds.txt\nGridFileName grid.txt\n"
    (layer / "nf.params").write_text(params)
    (layer / "grid.txt").write_text("1\n0 0 0 1 1 0\n")
    (layer / "seeds.txt").write_text("1,0,0,0\n" * 13)
    u = random_orientations(3, np.random.default_rng(0))
    out = _seeded_layer(str(layer), str(tmp_path / "seeded"), u)
    lines = (tmp_path / "seeded" / "nf.params").read_text().splitlines()
    assert "NrOrientations 3" in lines and "NrOrientations 13" not in lines
    assert "SeedOrientations seeds.txt" in lines
    assert (tmp_path / "seeded" / "grid.txt").read_text() == "1\n0 0 0 1 1 0\n"
    assert np.allclose(read_seeds(out + "/seeds.txt", expected=3), u, atol=1e-12)
    # the layer (and so a later plain `make demo` reusing it) keeps its own seeds
    assert (layer / "nf.params").read_text() == params
    assert len(read_seeds(str(layer / "seeds.txt"))) == 13
