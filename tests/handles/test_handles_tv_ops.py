"""torchvision's detection operators and embeddings."""

from opcount.handles import FLOPS
from opcount.ir import Const
from tests.fixtures.specs import NONE, C, T, flops

FN = Const(None, known=False)  # argument 0 of a prim::CallFunction: the function
SCRIPTED = "prim::CallFunction.torchvision."


def test_roi_align() -> None:
    # 150 boxes, 256 channels, 7x7 bins, 2x2 samples per bin: 4 bilinear samples (4 each) + average
    args = [T(1, 256, 10, 10), T(150, 5), C(0.03125), C(7), C(7), C(2), C(False)]
    assert flops("torchvision::roi_align", args, [T(150, 256, 7, 7)]) == 150 * 256 * 49 * 4 * 5
    # adaptive sampling (-1) assumes 2 samples per side
    args[5] = C(-1)
    assert flops("torchvision::roi_align", args, [T(150, 256, 7, 7)]) == 150 * 256 * 49 * 4 * 5
    args[5] = C(1)
    assert flops("torchvision::roi_align", args, [T(150, 256, 7, 7)]) == 150 * 256 * 49 * 5


def test_roi_pool_upper_bound() -> None:
    # a 14x14 map pooled to 7x7: bins of 2x2 cells, 3 maxes per output
    args = [T(1, 8, 14, 14), T(10, 5), C(1.0), C(7), C(7)]
    assert flops("torchvision::roi_pool", args, [T(10, 8, 7, 7), T(10, 8, 7, 7)]) == 10 * 8 * 49 * 3


def test_nms_all_pairs() -> None:
    # 100 boxes: 3 flops per area, 12 per IoU of each of the 4950 pairs
    assert flops("torchvision::nms", [T(100, 4), T(100), C(0.5)], [T(37, dtype="int64")]) == 300 + 12 * 4950
    assert flops("torchvision::nms", [T(0, 4), T(0), C(0.5)], [T(0, dtype="int64")]) == 0


def test_deform_conv2d() -> None:
    # [1, 4, 8, 8] -> [1, 6, 8, 8] with a 3x3 kernel, mask on:
    # conv 6*4*9*64 MACs + sampling 4*9*64 samples * (4 bilinear + 1 mask)
    args = [
        T(1, 4, 8, 8),
        T(6, 4, 3, 3),
        T(1, 18, 8, 8),
        T(1, 9, 8, 8),
        T(6),
        C(1),
        C(1),
        C(1),
        C(1),
        C(1),
        C(1),
        C(1),
        C(1),
        C(True),
    ]
    assert flops("torchvision::deform_conv2d", args, [T(1, 6, 8, 8)]) == 6 * 4 * 9 * 64 + 4 * 9 * 64 * 5
    args[13] = C(False)
    assert flops("torchvision::deform_conv2d", args, [T(1, 6, 8, 8)]) == 6 * 4 * 9 * 64 + 4 * 9 * 64 * 4
    assert FLOPS.handles["torchvision::deform_conv2d"].macs


def test_embedding_is_zero_cost_and_bags_add() -> None:
    assert "aten::embedding" in FLOPS.zero
    # 12 indices of 8-wide rows summed into 3 bags (mode 0), and averaged (mode 1)
    args = [T(100, 8), T(12, dtype="int64"), T(3, dtype="int64"), C(False), C(0), C(False), NONE, C(False), C(None)]
    assert flops("aten::embedding_bag", args, [T(3, 8)]) == 96
    args[4] = C(1)
    assert flops("aten::embedding_bag", args, [T(3, 8)]) == 96 + 24


def test_torchscript_helpers() -> None:
    # batched nms over 794 boxes: 9 * 794 for the class offsets, then nms
    args = [FN, T(794, 4), T(794), T(794, dtype="int64"), C(0.7)]
    expected = 9 * 794 + 3 * 794 + 12 * (794 * 793 // 2)
    assert flops(SCRIPTED + "ops.boxes._batched_nms_coordinate_trick", args, [T(300, dtype="int64")]) == expected
    # 100 masks pasted bilinearly onto an 800x800 image: at most 4 per output pixel
    args = [FN, T(100, 1, 30, 30), T(100, 4), T(dtype="int64"), T(dtype="int64")]
    out = [T(100, 1, 800, 800)]
    assert flops(SCRIPTED + "models.detection.roi_heads._onnx_paste_masks_in_image_loop", args, out) == 4 * 100 * 640000
    # 100 x 17 heatmaps of 56x56: bicubic (16) + argmax (1) per heatmap pixel
    args = [FN, T(100, 17, 56, 56), T(100, 4), *[T(100)] * 6, T(dtype="int64")]
    out = [T(100, 3, 17), T(100, 17)]
    name = SCRIPTED + "models.detection.roi_heads._onnx_heatmaps_to_keypoints_loop"
    assert flops(name, args, out) == 17 * 100 * 17 * 56 * 56
