"""Read a TFLite flatbuffer into plain tensors and operators (the converter's input).

The face models in the mediapipe wheel are TFLite files; reading them with the ``tflite``
schema package (generated from TFLite's own schema) keeps the converter independent of a
TFLite runtime, which the GPU image does not have. Only what the converter needs is kept:
tensor shapes, dtypes and constant contents, each operator's builtin name, inputs, outputs
and options table. Sparse constants (the full-range detector's DENSIFY inputs) are decoded
here, at conversion time, because the sparsity format is part of the file format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tflite
from tflite.utils import BUILTIN_OPCODE2NAME

from gpu.errors import ModelFileError

_DTYPES: dict[int, np.dtype] = {
    tflite.TensorType.FLOAT32: np.dtype(np.float32),
    tflite.TensorType.FLOAT16: np.dtype(np.float16),
    tflite.TensorType.INT32: np.dtype(np.int32),
    tflite.TensorType.INT64: np.dtype(np.int64),
    tflite.TensorType.UINT8: np.dtype(np.uint8),
    tflite.TensorType.INT8: np.dtype(np.int8),
}

# Builtin op name -> the options table class its operators carry (ops without options absent).
_OPTIONS: dict[str, type] = {
    "CONV_2D": tflite.Conv2DOptions,
    "DEPTHWISE_CONV_2D": tflite.DepthwiseConv2DOptions,
    "MAX_POOL_2D": tflite.Pool2DOptions,
    "ADD": tflite.AddOptions,
    "CONCATENATION": tflite.ConcatenationOptions,
    "RESHAPE": tflite.ReshapeOptions,
    "RESIZE_BILINEAR": tflite.ResizeBilinearOptions,
    "DEPTH_TO_SPACE": tflite.DepthToSpaceOptions,
    "MEAN": tflite.ReducerOptions,
    "FULLY_CONNECTED": tflite.FullyConnectedOptions,
}

_SPARSE_INDEX_VECTORS: dict[int, type] = {
    tflite.SparseIndexVector.Int32Vector: tflite.Int32Vector,
    tflite.SparseIndexVector.Uint16Vector: tflite.Uint16Vector,
    tflite.SparseIndexVector.Uint8Vector: tflite.Uint8Vector,
}


@dataclass(frozen=True)
class DimensionMetadata:
    """One level of TFLite's sparse traversal: dense (``size``) or CSR (segments, indices)."""

    dense_size: int | None
    segments: np.ndarray | None = None
    indices: np.ndarray | None = None


@dataclass(frozen=True)
class Sparsity:
    traversal_order: tuple[int, ...]
    block_map: tuple[int, ...]
    levels: tuple[DimensionMetadata, ...]


@dataclass(frozen=True)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None  # constant contents; for a sparse tensor, its stored values
    sparsity: Sparsity | None


@dataclass(frozen=True)
class Operator:
    kind: str  # TFLite builtin name, e.g. "CONV_2D"
    inputs: tuple[int, ...]  # tensor indices; -1 is an omitted optional input
    outputs: tuple[int, ...]
    options: Any  # the op's options table (tflite.Conv2DOptions, ...), or None


@dataclass(frozen=True)
class TfliteGraph:
    path: Path
    tensors: tuple[Tensor, ...]
    operators: tuple[Operator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def read_tflite(path: Path) -> TfliteGraph:
    """The first subgraph of ``path`` (the face models have exactly one)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelFileError(path, f"cannot read TFLite model: {exc.strerror or exc}") from exc
    if raw[4:8] != b"TFL3":
        raise ModelFileError(path, "not a TFLite flatbuffer (no TFL3 identifier)")
    model = tflite.Model.GetRootAsModel(raw, 0)
    if model.SubgraphsLength() != 1:
        raise ModelFileError(path, f"has {model.SubgraphsLength()} subgraphs; only single-graph models convert")
    graph = model.Subgraphs(0)
    tensors = tuple(_read_tensor(path, model, graph.Tensors(i), i) for i in range(graph.TensorsLength()))
    operators = tuple(_read_operator(path, model, graph.Operators(i)) for i in range(graph.OperatorsLength()))
    return TfliteGraph(
        path=path,
        tensors=tensors,
        operators=operators,
        inputs=tuple(int(i) for i in graph.InputsAsNumpy()),
        outputs=tuple(int(i) for i in graph.OutputsAsNumpy()),
    )


def _read_tensor(path: Path, model: tflite.Model, tensor: tflite.Tensor, index: int) -> Tensor:
    name = tensor.Name().decode()
    dtype = _DTYPES.get(tensor.Type())
    if dtype is None:
        raise ModelFileError(path, f"tensor {name!r} has TFLite type {tensor.Type()}, which the converter does not read")
    shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
    buffer = model.Buffers(tensor.Buffer())
    data = None
    if buffer is not None and buffer.DataLength():
        data = buffer.DataAsNumpy().view(dtype).copy()
    sparsity = _read_sparsity(tensor.Sparsity()) if tensor.Sparsity() is not None else None
    if data is not None and sparsity is None:
        data = data.reshape(shape)
    return Tensor(index=index, name=name, shape=shape, dtype=dtype, data=data, sparsity=sparsity)


def _read_sparsity(params: tflite.SparsityParameters) -> Sparsity:
    levels = []
    for i in range(params.DimMetadataLength()):
        meta = params.DimMetadata(i)
        if meta.Format() == tflite.DimensionType.DENSE:
            levels.append(DimensionMetadata(dense_size=int(meta.DenseSize())))
            continue
        levels.append(
            DimensionMetadata(
                dense_size=None,
                segments=_index_vector(meta.ArraySegmentsType(), meta.ArraySegments()),
                indices=_index_vector(meta.ArrayIndicesType(), meta.ArrayIndices()),
            )
        )
    return Sparsity(
        traversal_order=tuple(int(d) for d in params.TraversalOrderAsNumpy()),
        block_map=tuple(int(d) for d in params.BlockMapAsNumpy()) if params.BlockMapLength() else (),
        levels=tuple(levels),
    )


def _index_vector(kind: int, table: Any) -> np.ndarray:
    vector = _SPARSE_INDEX_VECTORS[kind]()
    vector.Init(table.Bytes, table.Pos)
    return vector.ValuesAsNumpy().astype(np.int64)


def _read_operator(path: Path, model: tflite.Model, op: tflite.Operator) -> Operator:
    code = model.OperatorCodes(op.OpcodeIndex())
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    kind = BUILTIN_OPCODE2NAME.get(builtin, f"builtin {builtin}")
    if kind == "CUSTOM":
        kind = f"CUSTOM ({code.CustomCode().decode()})"
    options = None
    table = op.BuiltinOptions()
    if kind in _OPTIONS and table is not None:
        options = _OPTIONS[kind]()
        options.Init(table.Bytes, table.Pos)
    return Operator(
        kind=kind,
        inputs=tuple(int(i) for i in op.InputsAsNumpy()),
        outputs=tuple(int(i) for i in op.OutputsAsNumpy()),
        options=options,
    )


def densify(tensor: Tensor) -> np.ndarray:
    """The dense array a sparse constant stands for (what TFLite's DENSIFY op computes).

    TFLite's format walks the tensor's dimensions (and block dimensions, for block-sparse
    tensors) in ``traversal_order``; a dense level enumerates every coordinate, a CSR level
    lists the present ones through segments/indices. Walked level by level on whole index
    arrays, so a million weights decode in milliseconds.
    """
    if tensor.sparsity is None or tensor.data is None:
        raise ValueError(f"tensor {tensor.name!r} is not a sparse constant")
    sparsity = tensor.sparsity
    rank = len(tensor.shape)
    block_sizes: dict[int, int] = {}
    position = np.zeros(1, dtype=np.int64)  # index into the next level (segments, or values)
    coords: dict[int, np.ndarray] = {}
    for dim, meta in zip(sparsity.traversal_order, sparsity.levels, strict=True):
        if meta.dense_size is not None:
            size = meta.dense_size
            coord = np.tile(np.arange(size, dtype=np.int64), len(position))
            position = np.repeat(position * size, size) + coord
            coords = {d: np.repeat(c, size) for d, c in coords.items()}
        else:
            assert meta.segments is not None and meta.indices is not None
            starts, ends = meta.segments[position], meta.segments[position + 1]
            counts = ends - starts
            position = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            coord = meta.indices[position]
            coords = {d: np.repeat(c, counts) for d, c in coords.items()}
        coords[dim] = coord
        if dim >= rank:
            block_sizes[dim] = int(meta.dense_size or 0)
    dense_index = []
    for d in range(rank):
        coord = coords[d]
        if d in sparsity.block_map:
            block_dim = rank + sparsity.block_map.index(d)
            coord = coord * block_sizes[block_dim] + coords[block_dim]
        dense_index.append(coord)
    dense = np.zeros(tensor.shape, dtype=tensor.dtype)
    dense[tuple(dense_index)] = tensor.data[position]
    return dense
