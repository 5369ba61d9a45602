"""PyTorch on sharc: `import sharc.torch`, then
`torch.distributed.init_process_group("sharc", ...)`.

The backend is a torch.distributed.ProcessGroup written in Python over
libsharc (ctypes). Each process group is one sharc communicator: rank 0
makes the unique id and passes it through torch's store (so torchrun and
init_method="env://" work unchanged), and every new_group / DeviceMesh
dimension gets a communicator of its own the same way (torch hands each
group its own prefixed store).

Every call is enqueued on the group's sharc stream and returns a Work whose
future completes when an event recorded after it fires (a waiter thread
sleeps in sharc_event_synchronize, the GIL released); `async_op=False`
simply waits on it. An error (a lost peer, a timeout) completes the future
with a sharc.SharcError naming the rank; nothing hangs past SHARC_TIMEOUT.

Tensors: contiguous CPU tensors of float32, float64, float16, bfloat16,
int8, uint8, int32, int64 (and uint32/uint64 where torch has them).
Reductions: sum, product, min, max, avg, and premul_sum (a sum of copies
scaled by the factor, floating types). Not yet: CUDA tensors.
"""

import ctypes
import queue
import threading

import torch
import torch.distributed as dist
from . import OK, SharcError, UniqueId, check, lib, status_name

__all__ = ["ProcessGroupSharc"]

# sharc_dtype_t and sharc_op_t (include/sharc.h)
_DTYPES = {
    torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3,
    torch.int8: 4, torch.uint8: 5, torch.int32: 6, torch.int64: 8,
}
for _name, _code in (("uint32", 7), ("uint64", 9)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code
_OPS = {
    dist.ReduceOp.SUM: 0, dist.ReduceOp.PRODUCT: 1, dist.ReduceOp.MIN: 2,
    dist.ReduceOp.MAX: 3, dist.ReduceOp.AVG: 4,
}
_PREMUL = dist.ReduceOp.PREMUL_SUM
_U8 = 5


def _dtype(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise TypeError(f"sharc backend: dtype {t.dtype} is not supported; "
                        f"use one of {sorted(str(d) for d in _DTYPES)}")


def _op(opts):
    """sharc's code for opts.reduceOp (a dict lookup on its RedOpType)."""
    op = opts.reduceOp
    code = _OPS.get(op.op)
    if code is None:
        raise NotImplementedError(
            f"sharc backend: reduction {op.op} is not supported "
            f"(sum, product, min, max, avg and premul_sum are)")
    return code


def _premul(opts):
    """The factor of a premul_sum reduction (a float or a 1-element
    tensor), None for any other."""
    if opts is None or opts.reduceOp.op != _PREMUL:
        return None
    return opts.reduceOp.factor


def _check_tensor(t, what):
    if not t.is_cpu:
        raise NotImplementedError(
            f"sharc backend: {what} is on {t.device}; only CPU tensors so far")
    if not t.is_contiguous():
        raise ValueError(f"sharc backend: {what} is not contiguous; call "
                         f".contiguous() first")


def _settle(fut, result, err):
    """Completes fut with result, or with err when it is not None."""
    if err is None:
        fut.set_result(result)
    else:
        fut.set_exception(err)
    return fut


class _Waiter:
    """One thread per group for what no caller waits on: it completes the
    futures that get_future() handed out, and it holds the tensors of a
    Work dropped before its call finished until it has, then frees its
    event. It sleeps in sharc_event_synchronize with the GIL released."""

    def __init__(self):
        self.q = queue.SimpleQueue()
        self.t = threading.Thread(target=self._run, daemon=True,
                                  name="sharc-waiter")
        self.t.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            item()


class _Work(dist.Work):
    """A call's handle. wait() sleeps in sharc_event_synchronize on the
    calling thread (the GIL released by ctypes), so completing a call wakes
    no other thread, and raises the call's error naming the rank. A future
    is made only when one is asked for (get_future): the group's waiter
    thread then completes it, so its callbacks run without a wait()."""

    def __init__(self, pg, ev, result, keep, what):
        super().__init__()
        self._pg, self._ev, self._res = pg, ev, result
        self._keep, self._what = keep, what
        self._lock = threading.Lock()
        self._done = False
        self._err = None
        self._fut = None

    def _finish(self):
        """Waits for the call (once, whoever asks first); returns its
        error or None. A future handed out is completed after the lock is
        released: its callbacks may call this Work again."""
        fut = None
        with self._lock:
            if not self._done:
                st = lib.sharc_event_synchronize(self._ev)
                if st != OK:
                    msg = lib.sharc_comm_last_error(self._pg._comm) or b""
                    self._err = SharcError(
                        status_name(st),
                        f"{self._what}: {msg.decode(errors='replace')}")
                self._pg._events.append(self._ev)  # atomic under the GIL
                self._ev = self._keep = None
                self._done = True
                fut = self._fut
        if fut is not None:
            _settle(fut, self._res, self._err)
        return self._err

    def wait(self, timeout=None):
        err = self._finish()
        if err is not None:
            raise err
        return True

    def is_completed(self):
        if self._done:
            return True
        flag = ctypes.c_int(0)
        if not self._lock.acquire(blocking=False):
            return False  # another thread is finishing it
        try:
            if self._ev is not None:
                lib.sharc_event_query(self._ev, ctypes.byref(flag))
        finally:
            self._lock.release()
        if flag.value:
            self._finish()
        return self._done

    def is_success(self):
        return self.is_completed() and self._err is None

    def exception(self):
        return self._finish()

    def get_future(self):
        with self._lock:
            if self._fut is not None:
                return self._fut
            self._fut = torch.futures.Future()
            if not self._done:  # _finish completes it
                self._pg._waiter.q.put(self._finish)
                return self._fut
        _settle(self._fut, self._res, self._err)  # no callback yet
        return self._fut

    def result(self):
        self.wait()
        return self._res

    def synchronize(self):
        self.wait()

    def __del__(self):
        # Dropped before anyone waited: the call may still read or write
        # the tensors, so the waiter keeps them until it has finished.
        if not self._done:
            self._pg._waiter.q.put(self._finish)


class _DoneWork(dist.Work):
    """The handle of a call that finished before it was returned (the
    blocking calls): no future unless someone asks for one."""

    def __init__(self, result):
        super().__init__()
        self._result = result

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def get_future(self):
        return _settle(torch.futures.Future(), self._result, None)

    def result(self):
        return self._result

    def synchronize(self):
        pass



class ProcessGroupSharc(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        key = "sharc_unique_id"
        if rank == 0:
            uid = UniqueId()
            check(lib.sharc_get_unique_id(ctypes.byref(uid)), None,
                  "sharc_get_unique_id")
            store.set(key, uid.to_bytes())
        else:
            uid = UniqueId.from_bytes(store.get(key))
        comm = ctypes.c_void_p()
        check(lib.sharc_comm_init_rank(ctypes.byref(comm), size,
                                       ctypes.byref(uid), rank), None,
              "sharc_comm_init_rank")
        self._comm = comm
        stream = ctypes.c_void_p()
        check(lib.sharc_stream_create(ctypes.byref(stream)), comm,
              "sharc_stream_create")
        self._stream = stream
        self._blocking = False
        self._events = []  # recorded and waited for: free to record again
        self._waiter = _Waiter()

    def getBackendName(self):
        return "sharc"

    # torch keeps a group's name in its C++ backends, which a process group
    # written in Python has none of: keep it here (DeviceMesh needs it).
    def _set_group_name(self, name):
        self._sharc_group_name = name

    @property
    def group_name(self):
        return self._sharc_group_name

    def _set_group_desc(self, desc):
        self._sharc_group_desc = desc

    @property
    def group_desc(self):
        return getattr(self, "_sharc_group_desc", "")

    @property
    def _c(self):
        return self._comm

    # ---- plumbing ----

    def _mode(self, opts):
        """A call torch will wait for at once (async_op=False: torch sets
        opts.asyncOp) runs blocking on the calling thread, the GIL released
        by ctypes: no event, no waiter thread. sharc's per-communicator
        order still puts it after the calls enqueued before it."""
        self._blocking = opts is not None and \
            getattr(opts, "asyncOp", True) is False

    def _done(self, result, keep, what):
        """A Work completing when everything enqueued so far is done. The
        events are reused: the waiter hands each back once it fired."""
        if self._blocking:
            self._blocking = False
            return _DoneWork(result)
        if self._events:
            ev = self._events.pop()
        else:
            ev = ctypes.c_void_p()
            check(lib.sharc_event_create(ctypes.byref(ev)), self._comm, what)
        check(lib.sharc_event_record(ev, self._stream), self._comm, what)
        return _Work(self, ev, result, keep, what)

    def _call(self, fn, what, *args):
        st = fn(*args, self._comm, None if self._blocking else self._stream)
        if st != OK:
            self._blocking = False
            check(st, self._comm, what)

    def _reduce_input(self, opts, t, what):
        """(sharc op, the tensor to send) for a reduction of t. premul_sum
        sends a copy of t scaled by the factor (t itself is left alone) and
        sums it. The copy is made on the calling thread, so it first waits
        for the calls enqueued before it: one of them may still write t."""
        if opts is None:
            return 0, t
        red = opts.reduceOp
        code = _OPS.get(red.op)
        if code is not None:
            return code, t
        factor = _premul(opts)
        if factor is None:
            _op(opts)  # raises, naming the reduction
        if not t.is_floating_point():
            raise TypeError(f"sharc backend: {what}: premul_sum scales by a "
                            f"float; {t.dtype} is not a floating type")
        if isinstance(factor, torch.Tensor):
            if factor.numel() != 1:
                raise ValueError(
                    f"sharc backend: {what}: premul_sum factor holds "
                    f"{factor.numel()} elements, want 1")
            factor = factor.to(device=t.device, dtype=t.dtype).reshape(())
        st = lib.sharc_stream_synchronize(self._stream)
        if st != OK:
            self._blocking = False
        check(st, self._comm, what)
        return 0, torch.mul(t, factor)

    # ---- collectives ----

    def allreduce(self, tensors, opts=None):
        self._mode(opts)
        keep = [tensors]
        for i, t in enumerate(tensors):
            _check_tensor(t, f"allreduce tensor {i}")
            op, src = self._reduce_input(opts, t, "allreduce")
            keep.append(src)
            self._call(lib.sharc_all_reduce, "allreduce", src.data_ptr(),
                       t.data_ptr(), t.numel(), _dtype(t), op)
        return self._done(tensors, keep, "allreduce")

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        self._mode(opts)
        for i, t in enumerate(tensors):
            _check_tensor(t, f"broadcast tensor {i}")
            self._call(lib.sharc_broadcast, "broadcast", t.data_ptr(),
                       t.data_ptr(), t.numel(), _dtype(t), opts.rootRank)
        return self._done(tensors, tensors, "broadcast")

    def _allgather_base(self, output, input, opts=None):
        self._mode(opts)
        _check_tensor(output, "allgather output")
        _check_tensor(input, "allgather input")
        if output.numel() != input.numel() * self.size():
            raise ValueError(
                f"sharc backend: allgather output holds {output.numel()} "
                f"elements, want {input.numel()} x {self.size()} ranks")
        self._call(lib.sharc_all_gather, "allgather", input.data_ptr(),
                   output.data_ptr(), input.numel(), _dtype(input))
        return self._done([output], [output, input], "allgather")

    def allgather(self, output_lists, inputs, opts=None):
        flats = []
        for outs, inp in zip(output_lists, inputs):
            flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype)
            self._allgather_base(flat, inp.contiguous())
            flats.append((flat, outs, inp))
        work = self._done(output_lists, flats, "allgather")
        work.wait()
        for flat, outs, inp in flats:
            for r, o in enumerate(outs):
                o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()]
                        .view_as(o))
        return _DoneWork(output_lists)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        self._mode(opts)
        for o, i in zip(outputs, inputs):
            _check_tensor(o, "allgather output")
            _check_tensor(i, "allgather input")
            self._call(lib.sharc_all_gather, "allgather", i.data_ptr(),
                       o.data_ptr(), i.numel(), _dtype(i))
        return self._done(outputs, [outputs, inputs], "allgather")

    def _reduce_scatter_base(self, output, input, opts=None):
        self._mode(opts)
        _check_tensor(output, "reduce_scatter output")
        _check_tensor(input, "reduce_scatter input")
        if input.numel() != output.numel() * self.size():
            raise ValueError(
                f"sharc backend: reduce_scatter input holds {input.numel()} "
                f"elements, want {output.numel()} x {self.size()} ranks")
        op, src = self._reduce_input(opts, input, "reduce_scatter")
        self._call(lib.sharc_reduce_scatter, "reduce_scatter",
                   src.data_ptr(), output.data_ptr(), output.numel(),
                   _dtype(output), op)
        return self._done([output], [output, input, src], "reduce_scatter")

    def reduce_scatter(self, outputs, input_lists, opts=None):
        keep = []
        for out, ins in zip(outputs, input_lists):
            flat = torch.cat([t.reshape(-1) for t in ins])
            keep.append(flat)
            self._reduce_scatter_base(out, flat, opts)
        return self._done(outputs, [outputs, keep], "reduce_scatter")

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        self._mode(opts)
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return self._done(outputs, [outputs, inputs], "reduce_scatter")

    def reduce(self, tensors, opts):
        self._mode(opts)
        keep = [tensors]
        for i, t in enumerate(tensors):
            _check_tensor(t, f"reduce tensor {i}")
            op, src = self._reduce_input(opts, t, "reduce")
            keep.append(src)
            self._call(lib.sharc_reduce, "reduce", src.data_ptr(),
                       t.data_ptr(), t.numel(), _dtype(t), op, opts.rootRank)
        return self._done(tensors, keep, "reduce")

    def barrier(self, opts=None):
        self._mode(opts)
        self._call(lib.sharc_barrier, "barrier")
        return self._done([], [], "barrier")

    def alltoall_base(self, output, input, output_split_sizes,
                      input_split_sizes, opts=None):
        self._mode(opts)
        _check_tensor(output, "alltoall output")
        _check_tensor(input, "alltoall input")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError("sharc backend: alltoall without splits "
                                 "needs equal tensors divisible by the "
                                 "group size")
            self._call(lib.sharc_all_to_all, "alltoall", input.data_ptr(),
                       output.data_ptr(), input.numel() // n, _dtype(input))
            return self._done([output], [output, input], "alltoall")
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 1
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] \
            else 1
        ins = input_split_sizes or [input.shape[0] // n] * n
        outs = output_split_sizes or [output.shape[0] // n] * n
        arr = ctypes.c_size_t * n
        sc, sd, rc, rd = arr(), arr(), arr(), arr()
        so = ro = 0
        for p in range(n):
            sc[p], sd[p] = ins[p] * row_in, so
            rc[p], rd[p] = outs[p] * row_out, ro
            so += sc[p]
            ro += rc[p]
        self._call(lib.sharc_all_to_allv, "alltoall", input.data_ptr(), sc,
                   sd, output.data_ptr(), rc, rd, _dtype(input))
        return self._done([output], [output, input, sc, sd, rc, rd],
                          "alltoall")

    # ---- coalescing (batch_isend_irecv): a sharc group ----
    supports_coalescing = True

    def _get_backend(self, device):
        return self

    def _start_coalescing(self, device):
        self._coalescing = getattr(self, "_coalescing", 0) + 1
        check(lib.sharc_group_start(), None, "sharc_group_start")

    def _end_coalescing(self, device):
        self._coalescing -= 1
        check(lib.sharc_group_end(), self._comm, "batched send/recv")
        keep, self._kept = getattr(self, "_kept", []), []
        return self._done([], keep, "batched send/recv")

    def _p2p_done(self, tensors, what):
        if getattr(self, "_coalescing", 0):  # issued by _end_coalescing
            self._kept = getattr(self, "_kept", []) + [tensors]
            return _DoneWork(tensors)
        return self._done(tensors, tensors, what)

    def send(self, tensors, dst, tag=0):
        self._mode(None)
        for t in tensors:
            _check_tensor(t, "send tensor")
            self._call(lib.sharc_send, "send", t.data_ptr(), t.numel(),
                       _dtype(t), dst)
        return self._p2p_done(tensors, "send")

    def recv(self, tensors, src, tag=0):
        self._mode(None)
        for t in tensors:
            _check_tensor(t, "recv tensor")
            self._call(lib.sharc_recv, "recv", t.data_ptr(), t.numel(),
                       _dtype(t), src)
        return self._p2p_done(tensors, "recv")

    # torch 2.10+ names (the *_single calls take flat tensors)
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes,
                          input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes,
                                  input_split_sizes, opts)

    def alltoall(self, outputs, inputs, opts=None):
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs),
                               dtype=flat_in.dtype)
        work = self.alltoall_base(
            flat_out, flat_in, [t.numel() for t in outputs],
            [t.numel() for t in inputs], opts)
        work.wait()
        o = 0
        for t in outputs:
            t.copy_(flat_out[o:o + t.numel()].view_as(t))
            o += t.numel()
        return _DoneWork(outputs)

    def gather_single(self, output, input, opts):
        self._mode(opts)
        _check_tensor(input, "gather input")
        root = self.rank() == opts.rootRank
        if root:
            _check_tensor(output, "gather output")
        self._call(lib.sharc_gather, "gather", input.data_ptr(),
                   output.data_ptr() if root else None, input.numel(),
                   _dtype(input), opts.rootRank)
        return self._done([output], [output, input], "gather")

    def gather(self, output_lists, inputs, opts):
        """dist.gather: root's list gets one tensor per rank. Gathers into
        one flat tensor (sharc_gather), then root copies it into the list."""
        if len(inputs) != 1:
            raise ValueError(f"sharc backend: gather takes one input tensor "
                             f"per rank, got {len(inputs)}")
        inp = inputs[0].contiguous()
        root = self.rank() == opts.rootRank
        if not root:
            return self.gather_single(inp.new_empty(0), inp, opts)
        outs = output_lists[0]
        if len(outs) != self.size() or any(
                o.numel() != inp.numel() for o in outs):
            raise ValueError(
                f"sharc backend: gather on root wants {self.size()} output "
                f"tensors of {inp.numel()} elements, got "
                f"{[o.numel() for o in outs]}")
        flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype)
        self.gather_single(flat, inp, opts).wait()
        for r, o in enumerate(outs):
            o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view_as(o))
        return _DoneWork(output_lists)

    def scatter(self, outputs, input_lists, opts):
        """dist.scatter: rank r's output gets root's r-th tensor. Root sends
        one flat copy of its list (sharc_scatter)."""
        self._mode(opts)
        if len(outputs) != 1:
            raise ValueError(f"sharc backend: scatter takes one output "
                             f"tensor per rank, got {len(outputs)}")
        out = outputs[0]
        _check_tensor(out, "scatter output")
        flat = None
        if self.rank() == opts.rootRank:
            ins = input_lists[0]
            if len(ins) != self.size() or any(
                    t.numel() != out.numel() for t in ins):
                raise ValueError(
                    f"sharc backend: scatter on root wants {self.size()} "
                    f"input tensors of {out.numel()} elements, got "
                    f"{[t.numel() for t in ins]}")
            flat = torch.cat([t.reshape(-1) for t in ins])
        self._call(lib.sharc_scatter, "scatter",
                   flat.data_ptr() if flat is not None else None,
                   out.data_ptr(), out.numel(), _dtype(out), opts.rootRank)
        return self._done(outputs, [outputs, flat], "scatter")

    def shutdown(self):
        if getattr(self, "_comm", None):
            lib.sharc_stream_synchronize(self._stream)
            self._waiter.q.put(None)
            self._waiter.t.join()
            for ev in self._events:
                lib.sharc_event_destroy(ev)
            self._events = []
            lib.sharc_stream_destroy(self._stream)
            lib.sharc_comm_destroy(self._comm)
            self._comm = None


def _create(store, rank, size, timeout):
    return ProcessGroupSharc(store, rank, size, timeout)


dist.Backend.register_backend("sharc", _create, devices=["cpu"])
