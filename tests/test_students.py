"""Students that train at a reduced resolution keep the teacher's input size in the exported model."""

from __future__ import annotations

import pytest
import torch

from dpconvert.io.spec import InputSpec
from dpconvert.students import create_student


@pytest.mark.parametrize("name", ["reduced_cnn", "reduced_wide_cnn"])
def test_a_reduced_student_exports_with_its_pooling_and_the_teachers_input_size(name):
    from dpconvert.io.export import export_onnx, parity

    spec = InputSpec(3, 224, 224, 10)
    student = create_student(name, spec).eval()
    assert student.factor == 7  # 224 px → 32 px inside the model
    proto = export_onnx(student, spec.shape)
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim][1:]
    assert dims == [3, 224, 224] and "AveragePool" in {n.op_type for n in proto.graph.node}
    result = parity(student, proto, torch.rand(8, *spec.shape) * 2 - 1)
    assert result.max_abs_diff < 1e-4 and result.top1_agreement == 1.0
    # the pooling is an average over 7×7 blocks: a constant image reaches the inner CNN unchanged
    x = torch.full((1, *spec.shape), 0.3)
    assert torch.allclose(student.pool(x), torch.full((1, 3, 32, 32), 0.3))
