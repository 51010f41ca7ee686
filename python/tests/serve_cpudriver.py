"""The serving path (`Replayer.serve`) of a replayer loaded on "cuda", run against recap's CPU
driver standing in for `libcuda.so.1`: run by test_serve.py in a fresh process whose library path
puts that driver first, so recap's CUDA backend and this program's ctypes calls reach the same
driver and the same device memory. Arguments: ARCHIVE MODE; prints `ok` when every check passed.

Modes:
  same        serve() with host arrays, and with GPU arrays in and out, gives the bytes run() gives
  pointers    GPU inputs and outputs that change from call to call (the graph's memcpy nodes are
              updated): every call's result is its own inputs'
  zero_copy   the kernels pointed at the caller's arrays (kernel node updates), arrays changing
              from call to call, and the refusals zero_copy names
  state       a call that does not give y (read and written) runs over what the previous call
              left in it, as a CUDA graph replayed by its program does; run() starts over
  refusals    a GPU array of the wrong shape or dtype, named
  torchlike   arrays read as torch tensors are (data_ptr(), shape, stride(), dtype): several cycled
              through are each recognised again, and a changed shape, a dtype or strides that do
              not fit are refused by name
"""

import ctypes
import sys
from ctypes import byref, c_uint64, c_void_p

import numpy as np

import recap

path, mode = sys.argv[1:3]
cu = ctypes.CDLL("libcuda.so.1")
N = 300


def ck(result, what):
    if result != 0:
        raise SystemExit(f"{what}: CUresult {result}")


class DeviceArray:
    """An array in device memory, as a GPU library exposes one (`__cuda_array_interface__`)."""

    def __init__(self, host):
        host = np.ascontiguousarray(host)
        self.shape, self.dtype, self.nbytes = host.shape, host.dtype, host.nbytes
        self.ptr = c_uint64()
        ck(cu.cuMemAlloc_v2(byref(self.ptr), c_uint64(max(host.nbytes, 1))), "cuMemAlloc")
        self.upload(host)
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr.value, False),
            "version": 3,
            "strides": None,
        }

    def upload(self, host):
        ck(cu.cuMemcpyHtoD_v2(self.ptr, host.ctypes.data_as(c_void_p), c_uint64(host.nbytes)), "cuMemcpyHtoD")

    def numpy(self):
        out = np.empty(self.shape, self.dtype)
        ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        ck(cu.cuMemcpyDtoH_v2(out.ctypes.data_as(c_void_p), self.ptr, c_uint64(self.nbytes)), "cuMemcpyDtoH")
        return out


class Shifted:
    """`array`'s memory from `offset` bytes in, as N float32s."""

    def __init__(self, array, offset):
        self.__cuda_array_interface__ = dict(
            array.__cuda_array_interface__, shape=(N,), data=(array.ptr.value + offset, False)
        )


class TorchLike:
    """What the serving path reads of a torch tensor on a GPU, over a DeviceArray's memory."""

    is_cuda = True

    class Dtype:
        def __init__(self, name):
            self.name = name

        def __str__(self):
            return self.name

    def __init__(self, array, strides=None):
        self.array, self.shape = array, array.shape
        self.dtype = TorchLike.Dtype(f"torch.{array.dtype.name}")
        self.strides = strides or (1,)

    def data_ptr(self):
        return self.array.ptr.value

    def stride(self):
        return self.strides

    def is_contiguous(self):
        return self.strides == (1,)


def axpy(x, y, a=2.0):
    return (np.float32(a) * x + y).astype(np.float32)


archive = recap.open(path)
rep = archive.replayer("cuda")
rng = np.random.default_rng(11)
xs = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
ys = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]

if mode == "same":
    for x, y in zip(xs, ys):
        want = rep.run(inputs={"x": x, "y": y}).outputs["y"]
        np.testing.assert_array_equal(want, axpy(x, y))
        got = rep.serve({"x": x, "y": y})
        assert set(got) == {"y"} and isinstance(got["y"], np.ndarray), got
        assert got["y"].tobytes() == want.tobytes()
        dx, dy, out = DeviceArray(x), DeviceArray(y), DeviceArray(np.zeros(N, np.float32))
        got = rep.serve({"x": dx, "y": dy}, {"y": out})
        assert got["y"] is out
        assert out.numpy().tobytes() == want.tobytes()
        # The caller's input arrays are copied from, never written.
        assert dy.numpy().tobytes() == y.tobytes()

elif mode == "pointers":
    dxs = [DeviceArray(x) for x in xs]
    dys = [DeviceArray(y) for y in ys]
    outs = [DeviceArray(np.zeros(N, np.float32)) for _ in range(3)]
    for i in [0, 1, 2, 1, 0, 2, 2]:
        rep.serve({"x": dxs[i], "y": dys[i]}, {"y": outs[i]})
        np.testing.assert_array_equal(outs[i].numpy(), axpy(xs[i], ys[i]))
    # Host outputs through the same graph shape with other pointers.
    got = rep.serve({"x": dxs[2], "y": dys[0]})["y"]
    np.testing.assert_array_equal(got, axpy(xs[2], ys[0]))

elif mode == "zero_copy":
    dxs = [DeviceArray(x) for x in xs]
    dys = [DeviceArray(y) for y in ys]
    for i in [0, 1, 2, 0]:
        dys[i].upload(ys[i])
        got = rep.serve({"x": dxs[i], "y": dys[i]}, {"y": dys[i]}, zero_copy=True)
        assert got["y"] is dys[i]
        np.testing.assert_array_equal(dys[i].numpy(), axpy(xs[i], ys[i]))
    plain = rep.run(inputs={"x": xs[1], "y": ys[1]}).outputs["y"]
    np.testing.assert_array_equal(plain, axpy(xs[1], ys[1]))
    refusals = [
        (lambda: rep.serve({"x": xs[0], "y": dys[0]}, {"y": dys[0]}, zero_copy=True), "input x is a host array"),
        (lambda: rep.serve({"x": dxs[0], "y": dys[0]}, {"y": dys[1]}, zero_copy=True), "y is read and written"),
        (lambda: rep.serve({"x": dxs[0]}, {"y": dys[1]}, zero_copy=True), "pass the same GPU array as input y"),
        (lambda: rep.serve({"x": dxs[0], "y": dys[0]}, zero_copy=True), "output y would come back to the host"),
    ]
    for call, words in refusals:
        try:
            call()
        except recap.RecapError as e:
            assert "zero_copy" in str(e) and words in str(e), str(e)
        else:
            raise SystemExit(f"not refused: {words}")
    # A refused call leaves the replayer serving.
    dys[2].upload(ys[2])
    rep.serve({"x": dxs[2], "y": dys[2]}, {"y": dys[2]}, zero_copy=True)
    np.testing.assert_array_equal(dys[2].numpy(), axpy(xs[2], ys[2]))
    # An array off the region's alignment is refused, and a call refused after a new x changes
    # nothing: the next call with that x and the earlier y still reads that x.
    align = next(r.align for r in archive.regions if r.name == "y")
    assert align > 1, align
    shifted = Shifted(DeviceArray(np.zeros(N + 1, np.float32)), 4 if align > 4 else 1)
    try:
        rep.serve({"x": dxs[0], "y": shifted}, {"y": shifted}, zero_copy=True)
    except recap.RecapError as e:
        assert f"not {align}-byte aligned" in str(e) and "for y" in str(e), str(e)
    else:
        raise SystemExit("a misaligned array was not refused")
    dys[2].upload(ys[2])
    rep.serve({"x": dxs[0], "y": dys[2]}, {"y": dys[2]}, zero_copy=True)
    np.testing.assert_array_equal(dys[2].numpy(), axpy(xs[0], ys[2]))

elif mode == "state":
    x = xs[0]
    replayed = rep.run(inputs={"x": x}).outputs["y"]
    # The replay left y holding its result; each call goes on from what the one before left.
    first = rep.serve({"x": x})["y"]
    np.testing.assert_array_equal(first, axpy(x, replayed))
    second = rep.serve({"x": x})["y"]
    np.testing.assert_array_equal(second, axpy(x, first))
    # run() starts from the initial state again.
    np.testing.assert_array_equal(rep.run(inputs={"x": x}).outputs["y"], replayed)

elif mode == "refusals":
    cases = [
        ({"x": DeviceArray(np.zeros(N + 1, np.float32))}, "input x"),
        ({"x": DeviceArray(np.zeros(N, np.float64))}, "input x"),
        ({"y": DeviceArray(np.zeros((N, 2), np.float32))}, "input y"),
    ]
    for inputs, words in cases:
        try:
            rep.serve(inputs)
        except recap.RecapError as e:
            assert words in str(e), str(e)
        else:
            raise SystemExit(f"not refused: {inputs}")
    try:
        rep.serve({"x": xs[0]}, {"nothing": DeviceArray(xs[0])})
    except recap.RecapError as e:
        assert "outputs names nothing, which is no output binding" in str(e), str(e)
    else:
        raise SystemExit("an unknown output name was not refused")
    np.testing.assert_array_equal(rep.serve({"x": xs[0], "y": ys[0]})["y"], axpy(xs[0], ys[0]))

elif mode == "torchlike":
    txs = [TorchLike(DeviceArray(x)) for x in xs] + [TorchLike(DeviceArray(xs[0] * 3))]
    outs = [TorchLike(DeviceArray(np.zeros(N, np.float32))) for _ in txs]
    wants = [axpy(x, ys[0]) for x in xs + [xs[0] * 3]]
    # Five tensors cycled through, one more than a binding remembers.
    for i in [0, 1, 2, 3, 0, 1, 2, 3, 3, 0]:
        got = rep.serve({"x": txs[i], "y": ys[0]}, {"y": outs[i]})
        assert got["y"] is outs[i]
        np.testing.assert_array_equal(outs[i].array.numpy(), wants[i])
    refusals = [
        (TorchLike(DeviceArray(np.zeros(N, np.float64))), "input x"),
        (TorchLike(DeviceArray(np.zeros(N, np.float32)), strides=(2,)), "input x: the tensor is not C-contiguous"),
    ]
    for value, words in refusals:
        try:
            rep.serve({"x": value})
        except recap.RecapError as e:
            assert words in str(e), str(e)
        else:
            raise SystemExit(f"not refused: {words}")
    # The same tensor with another shape (as after an in-place resize) is checked again.
    txs[1].shape = (N + 1,)
    try:
        rep.serve({"x": txs[1]})
    except recap.RecapError as e:
        assert "input x" in str(e), str(e)
    else:
        raise SystemExit("a tensor resized in place was not checked again")

else:
    raise SystemExit(f"unknown mode {mode}")
print("ok")
