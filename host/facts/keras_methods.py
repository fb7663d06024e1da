"""Keras's own methods of a user's model that are TF work: `self.compute_loss(y=..., y_pred=...)`
in a custom training step (the Keras guide "Customizing what happens in fit").

Keras's `Model.compute_loss` runs the loss the model was compiled with (`self._compile_loss`)
and adds the losses of its layers (`self.losses`): TF work, as long as each compiled loss is
Keras's own (a loss name, a Keras loss object or function; a user's loss function may do
host work, traced once it would do it once), the model's layers are TF work (the caller
judges those: oracle._all_tf), the class overrides none of what `compute_loss` calls, and
the compiled loss was built by an earlier call (building it makes Python state, and for
several outputs Keras metrics, whose variables are not made in a TF part).

The TF part reads `self._compile_loss` when it is traced: `reads` names it, and the caller
captures and guards it by identity (a `model.compile(loss=...)` between calls makes a new
one, so the next call takes another variant); `judged_by_instance` keeps a plan sliced for one
compiled loss from being reused for another (whose losses are judged again).
"""
from __future__ import annotations

from typing import Any, Callable

try:
    import keras
except ImportError:  # pragma: no cover - keras comes with tensorflow
    keras = None

# Keras's method -> the attributes of the model it reads that the TF part captures
_TF_METHODS = {"compute_loss": ("_compile_loss",)}


def _keras(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".", 1)[0] == "keras"


def tf_method(method: Any, all_tf: Callable[[Any], bool], unbuilt: list | None) -> bool:
    """Whether `method` (bound) is one of Keras's methods above, of a user's model whose
    calling it is TF work. `unbuilt`: where a compiled loss not built yet is noted (the
    caller slices again once a call has built it)."""
    fn, model = method.__func__, method.__self__
    if keras is None or fn.__name__ not in _TF_METHODS or not _keras(fn) or \
            not isinstance(model, keras.Model):
        return False
    cls = type(model)
    if getattr(cls, "compute_loss", None) is not fn or not _keras(
            getattr(cls, "_aggregate_additional_loss", None)) or not _keras(
            getattr(getattr(cls, "losses", None), "fget", None)):
        return False  # the class overrides what Keras's compute_loss calls
    compiled = getattr(model, "_compile_loss", None)
    if compiled is None or not _keras(type(compiled)):
        return False  # not compiled with a loss: Keras raises, every call, eagerly
    if not getattr(compiled, "built", False):
        if unbuilt is not None:
            unbuilt.append(model)
        return False
    return all(_keras_loss(entry[1]) for entry in compiled._flat_losses) and all_tf(model)


def _keras_loss(loss: Any) -> bool:
    """A Keras loss object of Keras's own class, or one wrapping a Keras loss function."""
    if loss is None:
        return True
    if not isinstance(loss, keras.losses.Loss) or not _keras(type(loss)):
        return False
    wrapped = getattr(loss, "fn", None)
    return wrapped is None or _keras(wrapped)


def reads(method: Any) -> tuple[str, ...]:
    """The attributes of its object a TF method above reads when traced (else ())."""
    fn = getattr(method, "__func__", None)
    if fn is None or keras is None or not _keras(fn):
        return ()
    return _TF_METHODS.get(fn.__name__, ())


def judged_by_instance(value: Any) -> bool:
    """A compiled loss: a plan that captured it depends on the object itself (its losses
    were judged), not only on its type."""
    cls = type(value)
    return keras is not None and cls.__name__ == "CompileLoss" and _keras(cls)
