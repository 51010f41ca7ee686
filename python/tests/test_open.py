"""Opening and inspecting archives: the tables as Python objects, contents as numpy arrays."""

import numpy as np
import pytest

import recap
from conftest import GOLDEN, N


def test_an_archive_opens_from_a_path_and_from_bytes_alike(axpy_archive):
    path, x, y = axpy_archive
    by_path = recap.open(path)
    by_bytes = recap.open(path.read_bytes())
    assert by_path.source == str(path)
    assert by_bytes.source == "<bytes>"
    for a in (by_path, by_bytes):
        assert [k.name for k in a.kernels] == ["axpy"]
        assert [(b.name, b.direction) for b in a.bindings] == [("x", "in"), ("y", "inout")]


def test_kernels_carry_their_parameter_layout_from_the_ptx(axpy_archive):
    a = recap.open(axpy_archive[0])
    (k,) = a.kernels
    assert k.module == "basics"
    # The .entry declares u64, u64, f32, u32: sizes and offsets, pointers or not.
    assert [(p.name, p.offset, p.size) for p in k.params] == [
        ("axpy_param_0", 0, 8),
        ("axpy_param_1", 8, 8),
        ("axpy_param_2", 16, 4),
        ("axpy_param_3", 20, 4),
    ]
    assert "axpy" in repr(k)
    (m,) = a.modules
    # The archive keeps the kernels that ran; the module's whole PTX text comes with them.
    assert (m.name, m.kernels, m.cubins) == ("basics", ["axpy"], [])
    assert m.ptx_bytes == len(a.ptx("axpy"))


def test_ops_read_as_launches_with_their_shape(axpy_archive):
    a = recap.open(axpy_archive[0])
    (op,) = a.ops
    assert op.kind == "launch"
    assert op.detail["kernel"] == "axpy"
    assert op.detail["grid"] == [(N + 127) // 128, 1, 1]
    assert op.detail["block"] == [128, 1, 1]
    assert repr(op) == f"Op(0: launch axpy grid=({(N + 127) // 128}, 1, 1) block=(128, 1, 1))"


def test_initial_and_expected_come_out_with_the_regions_dtype_and_shape(axpy_archive):
    path, x, y = axpy_archive
    a = recap.open(path)
    assert a.initial("x").dtype == np.float32
    np.testing.assert_array_equal(a.initial("x"), x)
    np.testing.assert_array_equal(a.initial("y"), y)
    # The builder ran the launch once on the CPU for the expected state.
    np.testing.assert_allclose(a.expected("y"), 2.0 * x + y, rtol=1e-6)
    region = next(r for r in a.regions if r.name == "y")
    assert (region.dtype, region.shape, region.size) == ("f32", (N,), 4 * N)
    assert region.has_initial and region.has_expected


def test_ptx_is_the_modules_text(axpy_archive, basics_ptx):
    a = recap.open(axpy_archive[0])
    assert a.ptx("axpy") == basics_ptx
    assert a.ptx("basics") == basics_ptx


def test_golden_archives_open_and_list_everything_they_hold():
    a = recap.open(GOLDEN / "all-features.recap")
    assert a.kernels and a.regions and a.ops
    kinds = {op.kind for op in a.ops}
    assert {"launch", "while"} <= kinds, kinds
    # Ops inside a while body are nested one deeper than the loop.
    loop = next(op for op in a.ops if op.kind == "while")
    assert a.ops[loop.id + 1].depth == loop.depth + 1
    text = repr(a)
    assert "all-features.recap" in text and "kernels" in text
    assert "| binding |" in a._repr_markdown_() or not a.bindings


def test_a_file_that_is_no_archive_raises_recaps_error_naming_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.recap"
    bad.write_bytes(b"not an archive at all" * 8)
    with pytest.raises(recap.RecapError, match="bad.recap"):
        recap.open(bad)
    with pytest.raises(recap.RecapError, match="magic|header|archive"):
        recap.open(b"\x00" * 64)
    with pytest.raises(recap.RecapError, match="No such file|not found|opening"):
        recap.open(tmp_path / "missing.recap")
    with pytest.raises(TypeError):
        recap.open(42)


def test_unknown_names_are_errors_that_list_what_there_is(axpy_archive):
    a = recap.open(axpy_archive[0])
    with pytest.raises(recap.RecapError, match="nope.*x, y|x, y.*nope|nope"):
        a.initial("nope")
    with pytest.raises(recap.RecapError, match="axpy"):
        a.ptx("nope")
