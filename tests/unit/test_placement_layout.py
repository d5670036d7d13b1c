"""Placement knows layouts: degrees checked against accelerator type and count at serialisation.

The training task is serialised with real flytekit (`get_serializable`), as `pyflyte package`
does; a layout that cannot fit the placement's nodes fails there, naming the field and the
valid choices in one line.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable

from platform_lib.errors import UserError, format_user_error
from platform_lib.models.presets import MODEL_PRESETS, get_model_config
from platform_lib.training.config import replace
from platform_lib.training.presets import small
from tasks.placement import (
    ACCELERATORS,
    FLAT_FSDP,
    LAUNCH_RECIPES,
    Placement,
    PlacementError,
    parse_layout,
    placement_from_env,
)
from tasks.placement import main as check_placement
from tasks.train import build_train_task

SETTINGS = SerializationSettings(
    image_config=ImageConfig(default_image=Image(name="default", fqn="drivetrain", tag="test")),
    project="drivetrain",
    domain="development",
    version="test",
)


def _env(task) -> dict[str, str]:
    template = get_serializable(OrderedDict(), SETTINGS, task).template
    (container,) = template.k8s_pod.pod_spec["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_a_layout_rides_in_the_serialised_task_and_the_pod_rebuilds_it() -> None:
    placement = Placement(accelerator="h100-80gb", accelerator_count=16, layout={"tp": 8, "pp": 2})
    assert placement.layout == {"pp": 2, "dp_replicate": 1, "dp_shard": 1, "tp": 8}
    env = _env(build_train_task(placement))
    assert env["DRIVETRAIN_LAYOUT"] == "pp=2,dp_replicate=1,dp_shard=1,tp=8"
    assert placement_from_env(env) == placement
    assert placement_from_env(env).layout_for("world_model_large") == placement.layout


def test_without_a_layout_the_task_is_serialised_as_before() -> None:
    env = _env(build_train_task(Placement(accelerator="a100-80gb", accelerator_count=8)))
    assert "DRIVETRAIN_LAYOUT" not in env


@pytest.mark.parametrize(
    ("count", "layout", "field", "message"),
    [
        (
            16,
            {"tp": 16},
            "layout.tp",
            "layout.tp=16: tensor parallel stays inside a node and this placement has "
            "2 node(s) x 8 a100-80gb; valid tp: 1, 2, 4, 8",
        ),
        (
            4,
            {"tp": 8},
            "layout.tp",
            "layout.tp=8: tensor parallel stays inside a node and this placement has "
            "1 node(s) x 4 a100-80gb; valid tp: 1, 2, 4",
        ),
        (
            24,
            {"pp": 2},
            "layout.pp",
            "layout.pp=2: each pipeline stage holds whole nodes or shares one node, and this "
            "placement has 3 node(s) x 8 a100-80gb; valid pp: 1, 3, 6, 12, 24",
        ),
        (
            8,
            {"tp": 4, "pp": 4},
            "layout.tp",
            "layout: tp x pp = 4 x 4 = 16 is more than the 8 ranks (1 node(s) x 8 a100-80gb); "
            "valid tp with pp=4: 1, 2",
        ),
        (
            8,
            {"dp_shard": 2, "tp": 2},
            "layout.dp_shard",
            "layout: pp x dp_replicate x dp_shard x tp = 1 x 1 x 2 x 2 = 4, not the 8 ranks "
            "(1 node(s) x 8 a100-80gb); valid dp_shard: -1 or 4",
        ),
        (
            8,
            {"dp_replicate": 3},
            "layout.dp_replicate",
            "layout: dp_replicate x tp x pp = 3 does not divide the 8 ranks (1 node(s) x 8 "
            "a100-80gb); valid dp_replicate with tp=1, pp=1: 1, 2, 4, 8",
        ),
        (8, {"pp": 0}, "layout.pp", "layout.pp=0: a degree is a positive integer"),
        (
            8,
            {"dp_shard": -2},
            "layout.dp_shard",
            "layout.dp_shard=-2: a degree is a positive integer or -1 (the rest of the ranks)",
        ),
    ],
)
def test_layouts_that_do_not_fit_fail_naming_the_field_and_the_choices(
    count, layout, field, message
) -> None:
    with pytest.raises(PlacementError) as info:
        Placement(accelerator="a100-80gb", accelerator_count=count, layout=layout)
    assert info.value.field == field
    assert str(info.value) == message


def test_a_bad_layout_fails_the_import_that_serialises_the_task(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `pyflyte package` and `make register` run: the setting is named, one line."""
    monkeypatch.setenv("DRIVETRAIN_ACCELERATOR_COUNT", "4")
    monkeypatch.setenv("DRIVETRAIN_LAYOUT", "tp=8")
    with pytest.raises(
        PlacementError, match=r"^DRIVETRAIN_LAYOUT: layout.tp=8: .*valid tp: 1, 2, 4$"
    ):
        placement_from_env()
    assert check_placement(["--project", "drivetrain", "--domain", "development"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: DRIVETRAIN_LAYOUT: layout.tp=8") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tp=x", "DRIVETRAIN_LAYOUT: tp='x': not an integer"),
        ("tq=2", "layout part 'tq=2': write name=degree with a name among pp, dp_replicate"),
        ("tp=2,tp=2", "layout names tp twice"),
        ("tp" * 101, "layout of 202 characters: at most 200"),
    ],
)
def test_malformed_layout_settings_are_refused(text, message) -> None:
    with pytest.raises(PlacementError, match=message):
        placement_from_env({"DRIVETRAIN_LAYOUT": text})


def test_parse_layout_reads_what_the_environment_writes() -> None:
    assert parse_layout("") == {}
    assert parse_layout(" tp = 2 , pp=2 ,") == {"tp": 2, "pp": 2}


def test_every_launch_recipe_names_a_model_and_fits_a_full_node_of_its_type() -> None:
    assert set(LAUNCH_RECIPES) <= set(ACCELERATORS)
    for accelerator, recipes in LAUNCH_RECIPES.items():
        per_node = ACCELERATORS[accelerator].per_node
        for model, recipe in recipes.items():
            assert model in MODEL_PRESETS, model
            for count in (per_node, 2 * per_node):
                layout = Placement(accelerator=accelerator, accelerator_count=count).layout_for(
                    model
                )
                assert (
                    layout["pp"] * layout["dp_replicate"] * layout["dp_shard"] * layout["tp"]
                    == count
                )
                assert {k: layout[k] for k in recipe} == recipe


def test_recipes_give_each_model_its_default_layout_and_the_rest_train_flat() -> None:
    cpu = Placement(accelerator="cpu", accelerator_count=8)
    assert cpu.layout_for("world_model_small") == {
        "pp": 1,
        "dp_replicate": 1,
        "dp_shard": 4,
        "tp": 2,
    }
    assert cpu.layout_for("bev_fusion_small") == {**FLAT_FSDP, "dp_shard": 8}
    with pytest.raises(PlacementError) as info:  # the recipe's 8-way TP on a 4-GPU node
        Placement(accelerator="a100-80gb", accelerator_count=4).layout_for("world_model_large")
    assert info.value.field == "LAUNCH_RECIPES['a100-80gb']['world_model_large'].tp"
    assert str(info.value).endswith("valid tp: 1, 2, 4")


def test_a_layout_the_model_cannot_run_fails_naming_the_field() -> None:
    """TP of a model without a TP plan, more pipeline stages than the model has split points."""
    placement = Placement(accelerator="cpu", accelerator_count=4, layout={"tp": 2})
    with pytest.raises(PlacementError) as info:
        placement.layout_for("bev_fusion_small")
    assert info.value.field == "layout.tp"
    assert str(info.value) == (
        "layout.tp: model 'bev_fusion_small' declares no tensor-parallel plan: set "
        "parallel.tp to 1, or pick a model with a TP plan (world_model_*)"
    )
    assert placement.layout_for("world_model_small")["tp"] == 2
    many_stages = Placement(accelerator="cpu", accelerator_count=8, layout={"pp": 8})
    with pytest.raises(PlacementError, match=r"^layout.pp: pp=8 with 1F1B needs 8 stages"):
        many_stages.layout_for("world_model_small")


def _config(model: str = "bev_fusion_small", **parallel):
    cfg = small()
    frames = get_model_config(model).temporal_frames if model.startswith("world_model") else 1
    return replace(
        cfg,
        model=replace(cfg.model, name=model),
        data=replace(cfg.data, window_frames=frames),
        parallel=replace(cfg.parallel, **parallel),
    )


def test_the_training_task_trains_with_the_recipe_layout_of_its_model() -> None:
    """`train_model` calls `PLACEMENT.apply_layout(config)` first (tasks/train.py)."""
    cpu8 = Placement(accelerator="cpu", accelerator_count=8)
    flat = _config()
    assert cpu8.apply_layout(flat) is flat  # no recipe: the config (and its hash) as it was
    laid_out = cpu8.apply_layout(_config("world_model_small"))
    assert (laid_out.parallel.tp, laid_out.parallel.dp_shard, laid_out.parallel.pp) == (2, 4, 1)
    chosen = _config("world_model_small", pp=2)  # a config that names degrees keeps them
    assert cpu8.apply_layout(chosen) is chosen
    explicit = Placement(accelerator="cpu", accelerator_count=8, layout={"pp": 2})
    assert explicit.apply_layout(_config("world_model_small")).parallel.pp == 2


@pytest.mark.parametrize(
    ("model", "parallel", "culprit", "line"),
    [
        (
            "world_model_small",
            {"tp": 16},
            "parallel.tp",
            "parallel.tp=16: tensor parallel stays inside a node and this placement has "
            "1 node(s) x 8 cpu; valid tp: 1, 2, 4, 8",
        ),
        (
            "bev_fusion_small",
            {"tp": 2},
            "parallel.tp",
            "parallel.tp: model 'bev_fusion_small' declares no tensor-parallel plan",
        ),
        (
            "world_model_small",
            {"pp": 2, "pp_microbatches": 3},
            "parallel.pp_microbatches",
            "parallel.pp_microbatches: 3 microbatches do not divide data.batch_size=2",
        ),
    ],
)
def test_a_config_layout_that_cannot_run_fails_the_task_in_one_line(
    model, parallel, culprit, line
) -> None:
    with pytest.raises(UserError) as info:
        Placement(accelerator="cpu", accelerator_count=8).apply_layout(_config(model, **parallel))
    assert info.value.culprit == culprit
    assert format_user_error(info.value).startswith(f"error: {line}")
    assert "change the degrees or the placement (cpu x 8, docs/cluster.md)" in str(info.value)
