"""BEV fusion model zoo: config checks, sample preparation (scatter, lift, target), network."""

from __future__ import annotations

import dataclasses
import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from platform_lib.models.bev_fusion.config import BEVFusionConfig
from platform_lib.models.bev_fusion.prepare import compute_camera_index, prepare_sample
from platform_lib.models.catalog import build_model, build_model_transform
from platform_lib.models.presets import get_model_config, list_models

CFG = get_model_config("bev_fusion_small")
K = np.array([[80.0, 0.0, 80.0], [0.0, 80.0, 48.0], [0.0, 0.0, 1.0]])
FORWARD = np.eye(4)  # ego_from_camera of a camera looking along ego +x (OpenCV axes)
FORWARD[:3, :3] = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def _jpeg(color) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (160, 96), color).save(buffer, format="JPEG")
    return buffer.getvalue()


def _sample(cameras=1, radar=True):
    names = [f"cam_{i}" for i in range(cameras)]
    lidar = np.array(
        [
            [10.1, 0.1, -1.0, 200.0],
            [10.2, 0.2, 1.0, 100.0],
            [-20.0, 20.0, 0.0, 50.0],
            [100.0, 0.0, 0.0, 1.0],
        ],
        dtype=np.float32,
    )
    return {
        "__key__": "log-a_000007",
        "cameras": {n: _jpeg((200, 20, 20)) for n in names},
        "calib": {
            "cameras": {
                n: {"width": 160, "height": 96, "intrinsics": K, "extrinsics": FORWARD}
                for n in names
            }
        },
        "lidar": lidar,
        "radar": np.array([[5.0, 5.0, 0.0, 3.0, 1.0], [5.1, 5.1, 0.0, 1.0, 1.0]], np.float32)
        if radar
        else None,
        "cuboids": {
            "class_group": ["vehicle"],
            "center": np.array([[10.0, 0.0, -1.0]]),
            "size": np.array([[4.0, 2.0, 1.5]]),
            "yaw": np.array([0.0]),
        },
    }


def test_presets_and_unknown_model():
    assert list_models() == [
        "bev_fusion_base",
        "bev_fusion_large",
        "bev_fusion_small",
        "bev_fusion_temporal",
        "world_model_large",
        "world_model_small",
    ]
    small = build_model("bev_fusion_small")
    assert 50_000 < sum(p.numel() for p in small.parameters()) < 500_000
    with pytest.raises(KeyError, match="bev_fusion_small"):
        get_model_config("resnet")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resolution", 0.0),
        ("camera_stride", 3),
        ("lidar_channels", 0),
        ("z_max", -5.0),
        ("x_max", -30.0),
    ],
)
def test_config_rejects_impossible_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        dataclasses.replace(CFG, **{field: value})


def test_prepare_sample_shapes_and_lidar_scatter():
    out = prepare_sample(_sample(), CFG)
    h = w = 64
    assert (
        out["lidar_bev"].shape == (CFG.lidar_features, h, w)
        and out["lidar_bev"].dtype == torch.float32
    )
    assert out["radar_bev"].shape == (2, h, w)
    assert out["camera_images"].shape == (CFG.max_cameras, 3, 48, 80)
    assert (
        out["camera_index"].shape == (CFG.max_cameras, h, w)
        and out["camera_index"].dtype == torch.int64
    )
    assert out["target"].shape == (3, h, w)
    # points at x 10.1/10.2, y 0.1/0.2 fall into row floor((10.1 + 25.6) / 0.8) = 44, col 32
    cell = out["lidar_bev"][:, 44, 32]
    assert cell[0] == 1 and cell[1] == pytest.approx(np.log1p(2))
    assert cell[2] == pytest.approx((1.0 + 3.0) / 6.0)  # max height normalised over z range
    assert cell[3] == pytest.approx(150.0 / 255.0)
    assert out["lidar_bev"][0].sum() == 2  # the point 100 m ahead is outside the grid
    assert out["target"][0, 44, 32] == 1 and out["target"][1:].sum() == 0


def test_radar_scatter_and_absent_radar():
    out = prepare_sample(_sample(), CFG)
    row, col = int((5.0 + 25.6) // 0.8), int((5.0 + 25.6) // 0.8)
    assert out["radar_bev"][0, row, col] == pytest.approx(np.log1p(2))
    assert out["radar_bev"][1, row, col] == pytest.approx(2.0)  # mean radial velocity, m/s
    assert prepare_sample(_sample(radar=False), CFG)["radar_bev"].abs().sum() == 0


def test_camera_lift_reads_the_right_columns_and_masks_empty_slots():
    out = prepare_sample(_sample(cameras=2), CFG)
    index = out["camera_index"]
    # cell centre (10.0, 0.4) m: u = 80 - 80 * 0.4 / 10 = 76.8 px -> column 9 of 20 (just left
    # of the image centre), depth 10 m -> bin 1 of 4 over 0-40 m
    ahead = int(index[0, 44, 32])
    assert divmod(ahead, CFG.lift_depth_bins) == (9, 1)
    assert divmod(int(index[0, 44, 31]), CFG.lift_depth_bins) == (10, 1)  # y = -0.4 m, right
    assert index[0, 10, 32] == -1  # 17 m behind the camera
    assert torch.equal(index[0], index[1]) and (index[2:] == -1).all()
    assert out["camera_images"][0, 0].mean() > 0.2 and out["camera_images"][2:].abs().sum() == 0
    direct = compute_camera_index(
        {"width": 160, "height": 96, "intrinsics": K, "extrinsics": FORWARD}, CFG
    )
    assert np.array_equal(direct, index[0].numpy())


def test_decoded_arrays_and_jpeg_bytes_give_the_same_input_size():
    sample = _sample()
    decoded = dict(
        sample, cameras={"cam_0": np.asarray(Image.open(io.BytesIO(sample["cameras"]["cam_0"])))}
    )
    a, b = prepare_sample(sample, CFG), prepare_sample(decoded, CFG)
    assert a["camera_images"].shape == b["camera_images"].shape
    assert torch.allclose(a["camera_images"], b["camera_images"], atol=0.05)


def test_too_many_cameras_or_missing_calib_name_the_sample():
    with pytest.raises(ValueError, match="log-a_000007.*max_cameras"):
        prepare_sample(_sample(cameras=7), CFG)
    bad = _sample()
    bad["calib"] = {"cameras": {}}
    with pytest.raises(ValueError, match="log-a_000007.*cam_0"):
        prepare_sample(bad, CFG)


def test_transform_is_picklable_and_deterministic():
    transform = pickle.loads(pickle.dumps(build_model_transform("bev_fusion_small")))
    a, b = transform(_sample()), prepare_sample(_sample(), CFG)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_forward_backward_shapes_and_camera_gradient():
    torch.manual_seed(0)
    model = build_model(CFG)
    batch = torch.utils.data.default_collate([prepare_sample(_sample(), CFG)] * 2)
    logits = model(
        batch["lidar_bev"], batch["radar_bev"], batch["camera_images"], batch["camera_index"]
    )
    assert logits.shape == (2, 3, 64, 64)
    torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["target"]).backward()
    first_conv = model.camera_encoder.cnn[0][0].weight
    assert first_conv.grad is not None and first_conv.grad.abs().sum() > 0


def test_camera_features_only_reach_cells_the_camera_sees():
    torch.manual_seed(0)
    model = build_model(CFG).eval()
    batch = torch.utils.data.default_collate([prepare_sample(_sample(), CFG)])
    with torch.no_grad():
        base = model.camera_encoder(batch["camera_images"], batch["camera_index"])
        other = model.camera_encoder(torch.rand_like(batch["camera_images"]), batch["camera_index"])
    seen = (batch["camera_index"] >= 0).any(dim=1)[0]
    changed = (base - other).abs().sum(dim=1)[0] > 0
    assert changed[~seen].sum() == 0 and changed[seen].float().mean() > 0.9


def test_config_is_flat_scalars():
    assert all(
        isinstance(v, int | float | str) for v in dataclasses.asdict(BEVFusionConfig()).values()
    )


def test_large_preset_builds_and_runs_one_sample():
    cfg = get_model_config("bev_fusion_large")
    assert (cfg.grid.height, cfg.grid.width) == (256, 256)
    model = build_model(cfg).eval()
    assert 300_000 < sum(p.numel() for p in model.parameters()) < 5_000_000
    batch = torch.utils.data.default_collate([prepare_sample(_sample(cameras=6), cfg)])
    with torch.no_grad():
        logits = model(
            batch["lidar_bev"], batch["radar_bev"], batch["camera_images"], batch["camera_index"]
        )
    assert logits.shape == (1, 3, 256, 256) and torch.isfinite(logits).all()


def test_lift_is_the_same_whether_the_loader_or_the_transform_resizes():
    """A 16:9 camera (cropped to the 5:3 input): decoding to model size in the loader
    (`LoaderConfig.camera_resize`, calib adjusted) gives the same lift and nearly the same pixels."""
    from platform_lib.imaging.decode import decode_sample_cameras
    from platform_lib.models.bev_fusion.prepare import camera_resize

    sample = _sample()
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (108, 192, 3), dtype=np.uint8)).save(
        buffer, format="JPEG", quality=95
    )
    k = np.array([[96.0, 0.0, 96.0], [0.0, 96.0, 54.0], [0.0, 0.0, 1.0]])
    sample["cameras"] = {"cam_0": buffer.getvalue()}
    sample["calib"] = {
        "cameras": {"cam_0": {"width": 192, "height": 108, "intrinsics": k, "extrinsics": FORWARD}}
    }
    direct = prepare_sample(sample, CFG)
    via_loader = prepare_sample(decode_sample_cameras(dict(sample), camera_resize(CFG)), CFG)
    assert torch.equal(direct["camera_index"], via_loader["camera_index"])
    assert torch.allclose(direct["camera_images"], via_loader["camera_images"], atol=1e-6)
    as_array = prepare_sample(
        {**sample, "cameras": {"cam_0": np.frombuffer(buffer.getvalue(), np.uint8)}}, CFG
    )
    assert torch.equal(
        as_array["camera_images"], direct["camera_images"]
    )  # JPEG bytes as a 1-D view
    # the crop keeps the full height (16:9 is wider than 5:3): 180 of 192 columns, centred
    full = {"width": 192, "height": 108, "intrinsics": k, "extrinsics": FORWARD}
    cropped = compute_camera_index(
        {**full, "width": 180, "intrinsics": k - [[0, 0, 6], [0, 0, 0], [0, 0, 0]]}, CFG
    )
    assert np.array_equal(cropped, direct["camera_index"][0].numpy())
    with pytest.raises(ValueError, match="cam_0.*calib"):
        prepare_sample({**sample, "calib": {"cameras": {"cam_0": {**full, "width": 160}}}}, CFG)
