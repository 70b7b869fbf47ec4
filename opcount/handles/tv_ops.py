"""torchvision's detection operators (torchvision::roi_align, nms, deform_conv2d, roi_pool, ...).

Sampling follows fvcore's interpolation convention: a bilinear sample is a weighted sum of its 4
neighbours, 4 operations. Counts that depend on the data (box sizes, how many boxes survive) are
taken at a stated assumption and say so.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const, tensor
from ._shapes import first_tensor_out, numel, shape_of
from .registry import FLOPS

BILINEAR_SAMPLE = 4
# sampling_ratio <= 0 asks for ceil(roi_size / pooled_size) samples per bin, which depends on the
# boxes; torchvision's detection heads use 2, which is assumed then.
ADAPTIVE_SAMPLING_ASSUMED = 2

# roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
# ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio)
# roi_pool / ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width)
ROI_INPUT, ROI_SAMPLING_RATIO = 0, 5


def roi_align_flops(out_numel: int, sampling_ratio: int) -> int:
    """``out * s^2 * (4 + 1)``: s x s bilinear samples per bin (4 each) and their average (1 each)."""
    s = sampling_ratio if sampling_ratio > 0 else ADAPTIVE_SAMPLING_ASSUMED
    return out_numel * s * s * (BILINEAR_SAMPLE + 1)


# [K, C, ph, pw] = roi_align([N, C, H, W], rois [K, 5], scale, ph, pw, sampling_ratio, aligned)
@FLOPS.register("torchvision::roi_align", "torchvision::ps_roi_align")
def roi_align(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel(out) * s^2 * 5: s x s bilinear samples per output bin (4 flops each, fvcore's bilinear) averaged (1 each); s = sampling_ratio, 2 assumed when adaptive (<= 0)."""
    ratio = const(inputs[ROI_SAMPLING_RATIO])
    if not isinstance(ratio, int):
        raise ValueError(f"torchvision::roi_align: argument {ROI_SAMPLING_RATIO} is not sampling_ratio: {ratio!r}")
    return roi_align_flops(first_tensor_out(outputs).numel, ratio)


# ([K, C, ph, pw], argmax) = roi_pool([N, C, H, W], rois [K, 5], scale, ph, pw)
@FLOPS.register("torchvision::roi_pool", "torchvision::ps_roi_pool")
def roi_pool(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel(out) * (bin - 1) maxes with bin = (H / ph) * (W / pw) input cells, i.e. the bins of a box covering the whole feature map (an upper bound: box sizes are data)."""
    *_, h, w = shape_of(inputs[ROI_INPUT])
    out = first_tensor_out(outputs)
    _, _, ph, pw = out.shape
    bin_cells = max(-(-h // ph) * -(-w // pw), 1)
    return out.numel * (bin_cells - 1)


# IoU of two boxes: 4 max/min for the intersection corners, 2 subtracts and 2 clamps for its
# sides, 1 multiply for its area, 2 for the union (a1 + a2 - inter), 1 divide. Areas: 2 subtracts
# and 1 multiply per box. Comparisons and the sort are selection, not arithmetic.
IOU_FLOPS, AREA_FLOPS = 12, 3


def nms_flops(n: int) -> int:
    """Areas of ``n`` boxes and the IoU of every pair: ``3 n + 12 n (n - 1) / 2``."""
    return AREA_FLOPS * n + IOU_FLOPS * (n * (n - 1) // 2)


# [kept] = nms(boxes [N, 4], scores [N], iou_threshold)
NMS_BOXES = 0


@FLOPS.register("torchvision::nms")
def nms(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """3 * N + 12 * N * (N - 1) / 2: every box's area, then the IoU of every pair, the worst case (how many boxes get suppressed early is data)."""
    return nms_flops(tensor(inputs[NMS_BOXES]).shape[0])


# deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
#               dilation_h, dilation_w, n_weight_groups, n_offset_groups, use_mask)
DEFORM_INPUT, DEFORM_WEIGHT, DEFORM_USE_MASK = 0, 1, 13


@FLOPS.register("torchvision::deform_conv2d", macs=True)
def deform_conv2d(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, c_out, ho, wo] = deform_conv2d([n, c_in, h, w], [c_out, c_in/g, kh, kw], offset, mask, ...): n * prod(w) * ho * wo (the convolution) + n * c_in * kh * kw * ho * wo * (4 + use_mask) (bilinear sampling as 4 multiply-adds, the modulation mask 1) multiply-adds."""
    n, c_in, *_ = shape_of(inputs[DEFORM_INPUT])
    w = shape_of(inputs[DEFORM_WEIGHT])
    out = first_tensor_out(outputs).shape
    if len(w) != 4 or len(out) != 4:
        raise ValueError(f"torchvision::deform_conv2d: weight {w} / output {out} are not 4-D")
    use_mask = const(inputs[DEFORM_USE_MASK]) is True
    positions = numel(out[2:])
    conv = n * numel(w) * positions
    samples = n * c_in * w[2] * w[3] * positions
    return conv + samples * (BILINEAR_SAMPLE + (1 if use_mask else 0))


# --- torchvision's TorchScript helpers -----------------------------------------------------------
# Under tracing torchvision calls a few helpers through torch.jit._script_if_tracing; the trace
# records one prim::CallFunction node per call, whose body has no traced shapes. These handles
# price such a call from its arguments, under the kind "prim::CallFunction.<qualified name>"
# (the function's TorchScript name without the "__torch__." prefix). Argument 0 is the function.
SCRIPTED = "prim::CallFunction."
CALL_ARG0 = 1


# [kept] = _batched_nms_coordinate_trick(boxes [N, 4], scores [N], idxs [N], iou_threshold)
@FLOPS.register(SCRIPTED + "torchvision.ops.boxes._batched_nms_coordinate_trick", name="batched_nms")
def batched_nms(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """9 * N + nms(N): the largest coordinate (4N), each box's class offset (N) added to its corners (4N), then nms over all N boxes (worst case, as torchvision::nms)."""
    n = tensor(inputs[CALL_ARG0]).shape[0]
    return 9 * n + nms_flops(n)


# [N, 1, H, W] = _onnx_paste_masks_in_image_loop(masks [N, 1, M, M], boxes [N, 4], im_h, im_w)
@FLOPS.register(
    SCRIPTED + "torchvision.models.detection.roi_heads._onnx_paste_masks_in_image_loop", name="paste_masks_in_image"
)
def paste_masks(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """4 * numel(out): each mask resized bilinearly (4 per pixel) onto its box, counted for a box covering the whole image (box sizes are data: an upper bound)."""
    return BILINEAR_SAMPLE * first_tensor_out(outputs).numel


# (xy [N, 3, K], scores [N, K]) = _onnx_heatmaps_to_keypoints_loop(maps [N, K, h, w], rois, ...)
@FLOPS.register(
    SCRIPTED + "torchvision.models.detection.roi_heads._onnx_heatmaps_to_keypoints_loop", name="heatmaps_to_keypoints"
)
def heatmaps_to_keypoints(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """17 * N * K * h * w: each heatmap resized bicubically (16 per pixel) to its box and its argmax taken (1 per pixel), counted at the heatmap's own size (box sizes are data: an estimate)."""
    return 17 * numel(shape_of(inputs[CALL_ARG0]))
