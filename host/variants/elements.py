"""What iterating a dataset is sure to give, for the loop channels that carry it.

A loop the host decides sends the values an iteration starts with (`for x, y in ds`,
`for batch in self.loader`). Where no misfit can be handed back to the host, the TF part
takes them any size (tfprog/part.py: TraceRuntime.loop), so a dimension eager knows is
unknown to the trace, and library code can take another path than eagerly: Keras'
convolution, not knowing its input's channels, runs the op compiled with XLA
(`_conv_xla`), whose float results differ from the Conv2D kernels eager runs (d2l's LeNet
over a `from_tensor_slices(...).batch(n).map(...)` loader: its first layer's kernel was an
ulp off eager's). Every element of a tf.data.Dataset has the dimensions its element_spec
gives: those stay known (ValueSpec.given). The call key holds the dataset: an argument's
description has its element_spec; one reached by an attribute chain is guarded by identity
(`with_given` returns its path).
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from ..facts import signature
from ...slicer.plan import ChannelKind, SlicePlan
from ...tfprog.channels import ValueSpec, width


def with_given(plan: SlicePlan, specs: dict, layouts: dict, values: dict,
               lookup) -> tuple[dict, dict[int, str]]:
    """`specs` with the dimensions a loop's targets get from the dataset it iterates
    given, and {loop channel: the path of its dataset} where the call key does not already
    describe that dataset (it is not an argument)."""
    specs, held = dict(specs), {}
    for channel in plan.channels:
        if channel.kind != ChannelKind.LOOP or channel.iterates is None or \
                not specs.get(channel.index):
            continue
        path, targets = channel.iterates
        obj = signature.resolve(path, values, lookup)
        elements = _element_leaves(obj, len(targets))
        if elements is None:
            continue
        new, start = list(specs[channel.index]), 0
        for name, layout in zip(channel.names, layouts.get(channel.index, ())):
            n = width(layout)
            given = elements[targets.index(name)] if name in targets else None
            if given is not None and len(given) == n:
                new[start:start + n] = [_given(s, e) for s, e in
                                        zip(new[start:start + n], given)]
            start += n
        if new != specs[channel.index]:
            specs[channel.index] = new
            if path not in values:
                held[channel.index] = path
    return specs, held


def _element_leaves(dataset, targets: int) -> list | None:
    """Per loop target, the TensorSpecs of what it binds (`for batch in d`: the element;
    `for x, y in d`: its items); None where `dataset` is none or its elements do not
    unpack so."""
    if not isinstance(dataset, tf.data.Dataset):
        return None
    element = dataset.element_spec
    if targets == 1:
        items = [element]
    elif isinstance(element, (tuple, list)) and len(element) == targets:
        items = list(element)
    else:
        return None
    leaves = [tf.nest.flatten(item) for item in items]
    return leaves if all(isinstance(s, tf.TensorSpec) for item in leaves for s in item) \
        else None


def _given(spec: ValueSpec, element: tf.TensorSpec) -> ValueSpec:
    """`spec` with the dimensions `element` guarantees given, where they agree with it."""
    if spec.python or spec.shape is None or element.dtype != spec.dtype or \
            element.shape.rank != len(spec.shape):
        return spec
    dims = tuple(element.shape.as_list())
    if any(d is not None and s is not None and d != s for d, s in zip(dims, spec.shape)):
        return spec
    return dataclasses.replace(spec, given=dims)
