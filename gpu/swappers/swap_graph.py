"""What the built-in swappers' ONNX graphs share: one way to add nodes, declare float
tensors and seal the model, so both graphs are built (and checked) the same way."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

OPSET = 16  # GridSample needs 16; its mode there is "bilinear" ("linear" is refused)


class GraphNodes(list):
    """The nodes of a graph being built; ``add`` names each node after its one output."""

    def add(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output


def tensor(name: str, *shape: str | int) -> onnx.ValueInfoProto:
    """A float32 graph input or output; string dimensions are symbolic."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def swap_model(name: str, nodes: GraphNodes, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               initializer: list[onnx.TensorProto]) -> onnx.ModelProto:
    """The finished model (IR 8, ``OPSET``), fully checked."""
    graph = helper.make_graph(nodes, name, inputs=inputs, outputs=outputs, initializer=initializer)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="swapcast")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
