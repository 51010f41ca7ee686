"""Archives built on the CPU from numpy arrays and PTX text: every dtype and shape round trips,
and each op of the capture API (launch, copy, fill, while/if) replays as recorded."""

import numpy as np
import pytest

import recap

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_shape_round_trips(tmp_path, dtype):
    rng = np.random.default_rng(3)
    src = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    b = recap.Builder()
    a = b.array("a", src)
    c = b.zeros("c", (3, 4, 5), dtype)
    assert (a.dtype, a.shape, a.nbytes) == (src.dtype.str, [3, 4, 5], src.nbytes)
    b.copy(a, c)
    b.save(tmp_path / "rt.recap", inputs=[("a", a)], outputs=[("c", c)])
    ar = recap.open(tmp_path / "rt.recap")
    for name in ("a", "c"):
        got = ar.initial(name) if name == "a" else ar.expected(name)
        assert got.dtype == src.dtype and got.shape == src.shape
        np.testing.assert_array_equal(got, src)
    # A new input goes through the copy unchanged, in either shape: its own or flat.
    new = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    out = ar.replay(inputs={"a": new}).outputs["c"]
    np.testing.assert_array_equal(out, new)
    out = ar.replay(inputs={"a": new.reshape(-1)}).outputs["c"]
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out, new)


def test_a_wrong_shape_names_the_region_and_what_fits(tmp_path):
    b = recap.Builder()
    a = b.array("a", np.zeros((2, 3), np.float32))
    c = b.zeros("c", (2, 3))
    b.copy(a, c)
    b.save(tmp_path / "s.recap", inputs=[("a", a)], outputs=[("c", c)])
    with pytest.raises(recap.RecapError, match=r"input a.*\[2, 3\]"):
        recap.open(tmp_path / "s.recap").replay(inputs={"a": np.zeros((3, 2), np.float32)})


def test_fill_and_if_replay_as_recorded(tmp_path):
    b = recap.Builder()
    out = b.zeros("out", 8, np.int32)
    flag = b.array("flag", np.ones(1, np.uint32))
    b.fill(out, 7)
    b.if_nonzero(flag, lambda b: b.fill(out, -3))
    path = tmp_path / "if.recap"
    b.save(path, inputs=[("flag", flag)], outputs=[("out", out)])
    a = recap.open(path)
    assert [op.kind for op in a.ops] == ["memset", "if", "memset"]
    r = a.replay(check=True)
    assert r.check.passed
    np.testing.assert_array_equal(r.outputs["out"], np.full(8, -3, np.int32))
    r = a.replay(inputs={"flag": np.zeros(1, np.uint32)})
    np.testing.assert_array_equal(r.outputs["out"], np.full(8, 7, np.int32))


def test_a_device_side_loop_runs_until_its_word_clears(tmp_path, basics_ptx):
    b = recap.Builder()
    counter = b.zeros("counter", 1, np.uint32)
    flag = b.array("flag", np.ones(1, np.uint32))
    limit = b.array("limit", np.array([5], np.uint32))
    b.load_ptx("basics", basics_ptx)
    b.while_nonzero(flag, lambda b: b.launch("count_up", 1, 32, [counter, flag, np.uint32(5)]), max_iterations=100)
    path = tmp_path / "loop.recap"
    b.save(path, inputs=[("flag", flag)], outputs=[("counter", counter)])
    del limit
    r = recap.open(path).replay(check=True)
    assert r.check.passed
    assert r.outputs["counter"].tolist() == [5]
    assert r.iterations[0].launches == 5


def test_the_builder_refuses_what_it_cannot_record(basics_ptx):
    b = recap.Builder()
    x = b.zeros("x", 4)
    flag = b.array("flag", np.ones(1, np.uint32))
    b.load_ptx("basics", basics_ptx)
    with pytest.raises(recap.RecapError, match="no kernel named nope.*axpy"):
        b.launch("nope", 1, 1, [])
    with pytest.raises(TypeError, match="takes 4 arguments"):
        b.launch("axpy", 1, 1, [x])
    with pytest.raises(TypeError, match="axpy_param_1: cannot pass a str"):
        b.launch("axpy", 1, 4, [x, "y", 2.0, 4])
    b.fill(x, 1.0)
    with pytest.raises(recap.RecapError, match="before the first op"):
        b.zeros("late", 4)
    with pytest.raises(recap.RecapError, match="f32"):
        b.while_nonzero(x, lambda b: None)

    def body(b):
        raise RuntimeError("from the body")

    with pytest.raises(RuntimeError, match="from the body"):
        b.if_nonzero(flag, body)


def test_python_numbers_take_the_parameters_size(tmp_path, basics_ptx):
    b = recap.Builder()
    x = b.array("x", np.ones(64, np.float32))
    y = b.zeros("y", 64)
    b.load_ptx("basics", basics_ptx)
    b.launch("axpy", 1, 64, [x, y, 3.0, 64])
    b.save(tmp_path / "n.recap", inputs=[("x", x)], outputs=[("y", y)])
    np.testing.assert_array_equal(recap.open(tmp_path / "n.recap").expected("y"), np.full(64, 3.0, np.float32))
