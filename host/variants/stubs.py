"""Host stubs the generated host code calls: `_gpe_rt.context()` and `_gpe_c.<op>(site, ...)`.

`Runtime` is one variant's `_gpe_rt`; `context` makes the `CallContext` a call uses, whose
`begin` starts it (sends the entry values and the part number to the sink); the
host code names each place it uses a channel by a site number.
When the host leaves a call early (an exception, an early return), `finish` follows the
site's precomputed route: it drains the outputs the TF part will still send and tells the
decision it will wait on next to cancel, so the next call finds every channel as it should.
When a value computed mid-call no longer fits its channel, `gate`/`flag` run a rescue: the
TF part hands over what it holds and the host finishes the call eagerly (`eager`).
"""
from __future__ import annotations

import functools
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as tf_context
from tensorflow.python.framework.ops import EagerTensor

from ...slicer import recursion
from ...slicer.plan import ChannelKind

from ...tfprog.channels import ValueSpec, flatten, matches, read_variable, spec_of
from ...tfprog.randomness import Collision, draw
from ...tfprog.unreached import Unreached
from .unreached import reached, relink



def eager_now() -> bool:
    """TF's `executing_eagerly()`, read as TF's generated ops read it (every call's path)."""
    ctx = tf_context._context  # noqa: SLF001 (None until TF made its context)
    return ctx._thread_local_data.is_eager if ctx is not None else tf_context.executing_eagerly()


class GuardError(RuntimeError):
    """A value computed mid-call no longer fits the channel built for it."""


class Raised:
    """What a host temporary hoisted out of a loop holds when computing it raised
    (slicer/hoist.py Key.RAISES: `1 - beta1 ** t` before an unrolled loop): no channel
    takes it, so the call is rescued at the gate that sends it and the host's copy of the
    loop computes it again where eager does, raising there; where the call cannot be
    rescued, the exception is raised at the gate (before the loop's first statement)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class EntryGuardFailed(Exception):
    """A value sent when a call starts does not fit its channel, or differs from the
    constant the TF part was built with (`name` is then set); nothing was sent, so the
    caller runs this call eagerly instead."""

    def __init__(self, message: str, name: str | None = None):
        super().__init__(message)
        self.name = name


def to_components(values, channel) -> list:
    """The queue components for `values`, checked against the channel's layouts and specs.
    Every call's common case (eager tensors of the exact dtypes and shapes of a channel of
    tensors) is checked on the tensors' dtype enums and shape tuples only.

    Python values go as NumPy scalars of the wire dtype: TF's op dispatch converts those in
    C++, while building an EagerTensor in Python stalls behind a running sink."""
    exact = channel.exact
    if exact is not None and len(values) == len(exact):
        for value, (enum, shape) in zip(values, exact):
            if type(value) is not EagerTensor or value._datatype_enum() != enum or \
                    value._shape_tuple() != shape:  # noqa: SLF001
                break
        else:
            return values
    return _components(values, channel.specs, channel.layouts, channel.label)


def _components(values, specs: list[ValueSpec], layouts: list, label: str) -> list:
    leaves = []
    for value, layout in zip(values, layouts):
        if layout is None and type(value) is EagerTensor:  # the common case, fast
            leaves.append(value)
            continue
        found, flat = flatten(value)
        if found != layout:
            raise GuardError(f"gpe: {label} expected a value shaped like {layout!r}, got "
                             f"{type(value).__name__}")
        leaves += flat
    out = []
    for value, spec in zip(leaves, specs):
        if type(value) is Raised:
            failed = GuardError(f"gpe: {label}: computing it raised {value.exc!r}")
            failed.raised = value.exc
            raise failed
        if type(value) is not EagerTensor and hasattr(value, "_gpe_pending"):
            value = value.resolve()
        if not matches(spec, value):
            raise GuardError(f"gpe: {label} expected {spec.describe()}, got "
                             f"{_describe(value)}")
        out.append(np.asarray(value, spec.dtype.as_numpy_dtype) if spec.python else value)
    return out


def _describe(value) -> str:
    try:
        return spec_of(value).describe()
    except TypeError:
        return type(value).__name__


class Runtime:
    """`_gpe_rt` of one variant's host code. The host code names each place it uses a
    channel by a site number (plan.sites gives the channel)."""
    read_variable = staticmethod(read_variable)  # run eagerly (slicer/hoist.py: _read_value)
    raised = Raised  # a hoisted temporary's failure (slicer/partition.py: _attempted)

    def __init__(self, variant, callee):
        # weakly: the variant holds the host program, which holds this runtime
        self.variant = weakref.proxy(variant)
        self.callee = callee  # fn, args -> (its SlicedFunction, args): see nested()
        plan = variant.plan
        self.sites = plan.sites
        first = plan.channel(plan.sites[0]) if plan.sites else None
        self.entry = first.index if first is not None and first.kind == ChannelKind.ENTRY else None
        self.waits = variant.part.waits
        self.folded = variant.folded  # [(name, index in the entry values, constant)]
        self.nested = variant.nested  # per nested call site: the callee variant, or None
        self.seeds = variant.part.seeds  # its legacy random ops' seeds, drawn per call
        # a value that no longer fits a decision channel: can the host take over there?
        # (not where the TF part holds values that are not tensors)
        self.rescuable = plan.rescuable
        self.unrescuable = {k for k, r in plan.rescues if variant.part.specs.get(r) is None}
        self.start_pos = 0 if self.entry is not None else -1  # begin sends the entry
        # where the host leaves a call: (channels to drain, (channel to cancel, kind) or None)
        self.routes = tuple(
            (tuple(k for k in drains if plan.channel(k).kind != ChannelKind.CHECK
                   or k in self.waits),
             None if cancel is None else (cancel, plan.channel(cancel).kind))
            for drains, cancel in plan.routes)

        self.session = variant.session
        # sites whose check waits for the TF part (the others only move `pos`)
        self.check_waits = frozenset(i for i, k in enumerate(self.sites) if k in self.waits)
        # context(): a call's context; nothing is sent until its `begin` (which the host
        # program runs inside the `try` whose `finally` runs `finish`: an interrupt between
        # the two cannot leave a call started that nothing cancels)
        self.context = functools.partial(CallContext, self)


class _Flags(dict):
    """The flag tensors, made once: an EagerTensor built per send is slow (the enqueue's
    fast path takes only tensors), and stalls behind a running sink."""

    def __missing__(self, value):
        tensor = self[value] = tf.constant(value, tf.int32)
        return tensor


_FLAGS = _Flags()


class CallContext:
    """One sliced call's channel operations. `eager`: after a rescue the host runs the
    rest of the call itself (the host program's copies of the TF statements run then).

    Each operation is an atomic step (host/runtime/interrupt.py): a Ctrl-C is raised before it
    did anything or after its bookkeeping; `pos` moves only once the channel operation
    is done, so that `finish` cancels from where the TF part really is."""

    __slots__ = ("rt", "channels", "pos", "eager", "started", "session", "blocking",
                 "run_by_caller")

    def __init__(self, rt: Runtime):
        # pos: the last site the host program used (an index into plan.sites)
        self.rt, self.channels, self.pos = rt, None, rt.start_pos
        self.eager = self.started = False
        self.run_by_caller = False  # a nested call: the caller's TF part runs this one's
        self.session = rt.session
        self.blocking = rt.session.blocking  # (a forked child's session has a new one)

    def begin(self, entry_values) -> None:
        """Start the call: check and convert the entry values first, so that a mismatch
        leaves nothing half-sent; then send the part number and the values together,
        one enqueue (Session.start_call), not interrupted once begun. A nested call sends
        its values to its entry queue and tells its caller's TF part to run it."""
        rt = self.rt
        if not eager_now():  # a trace must not send (nor count) anything
            raise EntryGuardFailed("called while a graph is being traced")
        registration = rt.variant.registration()  # (registering is a step of its own)
        session = self.session
        self.channels = registration.channels
        components = None
        if rt.entry is not None:
            channel = registration.channels[rt.entry]
            try:
                components = to_components(entry_values, channel)
            except GuardError as exc:
                raise EntryGuardFailed(str(exc)) from None
            for name, index, constant in rt.folded:
                value = entry_values[index]
                if type(value) is not type(constant) or value != constant:
                    raise EntryGuardFailed(f"{rt.variant.plan.spell(name)}: expected "
                                           f"{constant!r}, got {value!r}", name)
            if rt.seeds:  # as eager's random ops draw them (the call runs sliced now)
                try:
                    components = (*components, draw(rt.seeds))  # (a tuple: to_components)
                except Collision as exc:
                    raise EntryGuardFailed(str(exc)) from None
        with self.blocking.shield():
            nested_start = session.nested_start
            if nested_start is not None:  # run by the caller's TF part: no part number
                if components is not None:
                    channel.send(components)
                session.nested_start = None
                self.run_by_caller = True
                nested_start()
            else:
                try:
                    session.start_call(registration, () if components is None else components)
                except (tf.errors.OpError, RuntimeError) as exc:
                    if isinstance(exc, RuntimeError) and not session.failed:
                        raise
                    session.raise_failure("the call's dispatch queue", exc)
            self.started = True

    def recv(self, site: int):
        channel = self.channels[self.rt.sites[site]]
        with self.blocking:
            if channel.layouts and channel.layouts[0] is not None or channel.python:
                value = channel.recv_now()[0]  # a list of TF values, a Python value: now
            else:
                value = channel.recv()  # registered with the channel: received in order
            self.pos = site
        return value

    def gate(self, site: int, values) -> bool:
        """Send the values the TF part waits for here; True if one no longer fits, so the
        TF part handed over its live values and the host finishes the call eagerly."""
        return self.flag(site, 1, values)

    def _rescue(self, k: int, channel, failed: GuardError) -> bool:
        """Tell the TF part waiting on channel `k` to stop and hand over what it holds; the
        host finishes the call eagerly (raises `failed` where that is not possible)."""
        if not self.rt.rescuable or k in self.rt.unrescuable:
            raise getattr(failed, "raised", failed)
        channel.send([_FLAGS[2]] + _zeros(channel))
        self.eager = True
        self.rt.variant.fell_back(f"mid-call: {failed}", k)
        return True

    def nested(self, call: int, skip: int, wait: int, slot: int, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` where fn is a function gpe slices too. When it takes the
        variant this part's TF part runs at `slot`, its host program runs nested: just
        before it sends anything, the TF part is told (site `call`) to run that variant's
        TF part. Otherwise (another variant, its entry does not fit, or after a rescue) the
        TF part is told to skip it (site `skip`) and fn runs eagerly once the TF part's
        earlier effects are done (site `wait`), as eager would."""
        if self.eager:
            return fn(*args, **kwargs)
        callee = self.rt.nested[slot]
        sliced, all_args = self.rt.callee(fn, args)
        now = sliced.variants.get(sliced.key_for(all_args, kwargs))
        if now is not callee and now is not None:  # the callee was built (again) since
            relink(self.rt.variant, now)
        elif now is not None and not callee.eager_faster:  # (this call's key's variant)
                session = self.rt.variant.session
                session.nested_start = functools.partial(self._nested_start, sliced, call)
                try:
                    return sliced.nested_call(callee, all_args, kwargs)
                except EntryGuardFailed:
                    pass  # nothing was sent for the callee (nor counted): run it eagerly below
                finally:
                    session.nested_start = None
        self.flag(skip, 0)
        self.barrier(wait)
        return fn(*args, **kwargs)

    def _nested_start(self, sliced, call: int) -> None:
        """A nested call's begin, its entry values sent: it is a call of `sliced` (counted
        now), and this part's TF part runs its TF part (site `call`)."""
        sliced.nested_started()
        self.flag(call, 1)

    def unrolled(self, fn, *args) -> None:
        """A recursion over a tree whose TF half the TF part runs: the host runs its host
        half here (its tests, counters and recursive calls: slicer/recursion.py); after a
        rescue the host's copy of the statement calls the function itself."""
        if self.eager:
            return
        both, owner = recursion.halves(fn)
        if owner is not None:
            both.host(owner, *args)
        else:
            both.host(*args)

    def rescued(self, k: int) -> tuple:
        """The TF values live at the gate that failed (RESCUE channel `k`)."""
        with self.blocking:
            return tuple(self.channels[k].recv_now())

    def flag(self, site: int, value: int, values=()) -> bool:
        """Tell the TF part about a loop iteration or the branch taken (see ChannelKind),
        with the values an iteration starts with; True if those no longer fit (a rescue,
        as at a gate)."""
        if self.eager:
            return False
        k = self.rt.sites[site]
        channel = self.channels[k]
        with self.blocking:
            if value > 0 and channel.specs:
                try:
                    components = to_components(values, channel)
                except GuardError as failed:
                    # raises where no rescue is possible: nothing was sent here, so the
                    # call is cancelled at this crossing (finish), not after it
                    self._rescue(k, channel, failed)
                else:
                    channel.send([_FLAGS[value], *components])
            elif value > 0 and type(channel.specs) is Unreached:  # no profile call got here
                self._rescue(k, channel, GuardError(reached(self.rt.variant, k, values)))
            else:
                channel.send([_FLAGS[value]] + _zeros(channel))
            self.pos = site
        if self.eager:  # rescued here: the host finishes the call eagerly
            self._tf_part_done()
        return self.eager

    def _tf_part_done(self) -> None:
        """Wait until the rescued TF part has ended the call: the host's eager code after
        the rescue runs on the call's own thread, whose variable reads take no fence
        (Session.fence_target), so a variable the TF part wrote before the gate was read
        as it was before that write when the graph was behind (fuzz seed 80328: 4 runs in
        12 under load). A nested call's TF part is its caller's, which goes on after the
        rescue: not waited for here."""
        if not self.run_by_caller:
            self.session.fence()

    def barrier(self, site: int) -> None:
        if self.eager:
            return
        with self.blocking:  # the token is registered with the channel before the wait
            self.pos = site
            self.channels[self.rt.sites[site]].wait()

    def check(self, site: int) -> None:
        if self.eager:
            return
        if site not in self.rt.check_waits:  # nothing to wait for: no channel operation
            self.pos = site
            return
        with self.blocking:
            self.pos = site
            self.channels[self.rt.sites[site]].wait()

    def finish(self) -> None:
        """The host function is leaving (returned, early or not, or raised): cancel what is
        left of this call's TF part. Nothing to do when the host program ran to its end,
        or when the call never started. Its waits are not interrupted (the TF part must
        get its cancellation): a Ctrl-C meanwhile is raised when it is done."""
        if self.eager or not self.started:  # the TF part stopped at the rescue, or has
            if self.started and self.rt.variant.replay is not None:  # nothing of this call
                self.rt.variant.replay.stopped()
            return
        drains, cancel = self.rt.routes[self.pos]
        if not drains and cancel is None:  # the TF part runs the whole call
            if self.rt.variant.replay is not None:
                self.rt.variant.replay.ran()
            return
        with self.blocking.shield():
            try:
                for k in drains:
                    self.channels[k].recv()  # dropped: dequeued, in order, when needed
                if cancel is not None:
                    k, kind = cancel
                    channel = self.channels[k]
                    channel.send([_FLAGS[0 if kind == ChannelKind.GATE else -1]]
                                 + _zeros(channel))
            except Exception:  # the session failed: nothing is left to cancel
                pass
            replay = self.rt.variant.replay
            if replay is not None:  # not cancelled: the TF part runs the whole call
                replay.ran() if cancel is None else replay.stopped()


def _zeros(channel) -> list:
    """Components that fill a flag's values when no iteration follows."""
    return [np.zeros((), s.dtype.as_numpy_dtype) for s in channel.specs]
