"""sharc from Python: the C library through ctypes.

Finds libsharc.so in this order: the SHARC_LIBRARY environment variable (a
path to the file), a build folder next to this package's source tree
(../build*/libsharc.so, for `pip install -e`), then the system's library
search path (an installed sharc). `import sharc.torch` registers the
PyTorch backend ("sharc").
"""

import ctypes
import ctypes.util
import glob
import os

__all__ = ["lib", "SharcError", "check", "library_path"]

# sharc_status_t values (include/sharc.h); names come from the library.
OK = 0


def _find():
    env = os.environ.get("SHARC_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))  # python/sharc -> repo
    for cand in sorted(glob.glob(os.path.join(root, "build*", "libsharc.so"))):
        return cand
    found = ctypes.util.find_library("sharc")
    if found:
        return found
    raise OSError(
        "libsharc.so not found: set SHARC_LIBRARY to its path, build sharc "
        "(cmake -B build && cmake --build build) next to this package, or "
        "install it")


library_path = _find()
lib = ctypes.CDLL(library_path)

_c = ctypes.c_void_p
_st = ctypes.c_int
_sz = ctypes.c_size_t
_i = ctypes.c_int
_p = ctypes.POINTER


def _proto(name, restype, *args):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(args)
    return f


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]

    def to_bytes(self):
        return ctypes.string_at(ctypes.addressof(self), ctypes.sizeof(self))

    @classmethod
    def from_bytes(cls, raw):
        if len(raw) != ctypes.sizeof(cls):
            raise ValueError(f"a sharc unique id is {ctypes.sizeof(cls)} "
                             f"bytes, got {len(raw)}")
        uid = cls()
        ctypes.memmove(ctypes.addressof(uid), raw, len(raw))
        return uid


_proto("sharc_version", ctypes.c_char_p)
_proto("sharc_status_name", ctypes.c_char_p, _st)
_proto("sharc_last_error", ctypes.c_char_p)
_proto("sharc_comm_last_error", ctypes.c_char_p, _c)
_proto("sharc_get_unique_id", _st, _p(UniqueId))
_proto("sharc_comm_init_rank", _st, _p(_c), _i, _p(UniqueId), _i)
_proto("sharc_comm_destroy", _st, _c)
_proto("sharc_comm_abort", _st, _c)
_proto("sharc_comm_status", _st, _c)
_proto("sharc_stream_create", _st, _p(_c))
_proto("sharc_stream_destroy", _st, _c)
_proto("sharc_stream_synchronize", _st, _c)
_proto("sharc_event_create", _st, _p(_c))
_proto("sharc_event_destroy", _st, _c)
_proto("sharc_event_record", _st, _c, _c)
_proto("sharc_event_synchronize", _st, _c)
_proto("sharc_event_query", _st, _c, _p(_i))
_proto("sharc_all_reduce", _st, _c, _c, _sz, _i, _i, _c, _c)
_proto("sharc_all_gather", _st, _c, _c, _sz, _i, _c, _c)
_proto("sharc_reduce_scatter", _st, _c, _c, _sz, _i, _i, _c, _c)
_proto("sharc_broadcast", _st, _c, _c, _sz, _i, _i, _c, _c)
_proto("sharc_reduce", _st, _c, _c, _sz, _i, _i, _i, _c, _c)
_proto("sharc_all_to_all", _st, _c, _c, _sz, _i, _c, _c)
_proto("sharc_gather", _st, _c, _c, _sz, _i, _i, _c, _c)
_proto("sharc_scatter", _st, _c, _c, _sz, _i, _i, _c, _c)
_proto("sharc_all_to_allv", _st, _c, _p(_sz), _p(_sz), _c, _p(_sz), _p(_sz),
       _i, _c, _c)
_proto("sharc_barrier", _st, _c, _c)
_proto("sharc_send", _st, _c, _sz, _i, _i, _c, _c)
_proto("sharc_recv", _st, _c, _sz, _i, _i, _c, _c)
_proto("sharc_group_start", _st)
_proto("sharc_group_end", _st)


class SharcError(RuntimeError):
    """A sharc call failed: .status is its sharc_status_t name."""

    def __init__(self, status, message):
        super().__init__(f"{message} ({status})")
        self.status = status


def status_name(st):
    return lib.sharc_status_name(st).decode()


def check(st, comm=None, what="sharc"):
    """Raises SharcError for a failed status, with sharc's message."""
    if st == OK:
        return
    msg = (lib.sharc_comm_last_error(comm) if comm else
           lib.sharc_last_error()) or b""
    raise SharcError(status_name(st), f"{what}: {msg.decode(errors='replace')}")
