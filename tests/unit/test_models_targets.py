"""BEV occupancy targets: rotated cuboid footprints on the ego-frame grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from platform_lib.models.targets import BEVGrid, rasterise_cuboids

GRID = BEVGrid(x_min=-10.0, x_max=10.0, y_min=-10.0, y_max=10.0, resolution=1.0)


def _boxes(groups, centers, sizes, yaws):
    return {
        "class_group": list(groups),
        "center": np.asarray(centers, float),
        "size": np.asarray(sizes, float),
        "yaw": np.asarray(yaws, float),
    }


def test_grid_shape_and_cell_index():
    assert (GRID.height, GRID.width) == (20, 20)
    rows, cols, inside = GRID.cell_index(
        np.array([-10.0, 0.2, 9.99, 10.0]), np.array([0.0, -0.2, 0.0, 0.0])
    )
    assert rows.tolist()[:3] == [0, 10, 19] and cols.tolist()[:2] == [10, 9]
    assert inside.tolist() == [True, True, True, False]


def test_axis_aligned_box_covers_cells_whose_centres_it_contains():
    target = rasterise_cuboids(
        _boxes(["vehicle"], [[0.0, 0.0, 0.0]], [[4.0, 2.0, 1.5]], [0.0]), GRID
    )
    assert target.shape == (3, 20, 20) and target.dtype == np.float32
    occupied = np.argwhere(target[0] > 0)
    # x in [-2, 2] -> rows 8..11 (centres -1.5..1.5), y in [-1, 1] -> cols 9..10
    assert sorted({int(r) for r in occupied[:, 0]}) == [8, 9, 10, 11]
    assert sorted({int(c) for c in occupied[:, 1]}) == [9, 10]
    assert target[0].sum() == 8 and target[1:].sum() == 0


def test_rotation_by_90_degrees_swaps_the_footprint_axes():
    straight = rasterise_cuboids(
        _boxes(["vehicle"], [[0.0, 0.0, 0.0]], [[6.0, 2.0, 1.5]], [0.0]), GRID
    )
    turned = rasterise_cuboids(
        _boxes(["vehicle"], [[0.0, 0.0, 0.0]], [[6.0, 2.0, 1.5]], [math.pi / 2]), GRID
    )
    np.testing.assert_array_equal(turned[0], straight[0].T)


def test_diagonal_box_is_a_rotated_rectangle_not_its_bounding_box():
    target = rasterise_cuboids(
        _boxes(["vehicle"], [[0.0, 0.0, 0.0]], [[8.0, 1.0, 1.5]], [math.pi / 4]), GRID
    )
    area = target[0].sum()
    assert 5 <= area <= 12  # ~8 m^2 footprint, far below the 6.4 x 6.4 m bounding box (~40 cells)
    assert target[0, 12, 12] == 1 and target[0, 12, 7] == 0  # along the diagonal, not across it


def test_small_box_marks_its_centre_cell_and_groups_go_to_their_channel():
    target = rasterise_cuboids(
        _boxes(
            ["pedestrian", "cyclist", "other"],
            [[3.3, -4.6, 0], [-5.0, 5.0, 0], [0, 0, 0]],
            [[0.3, 0.3, 1.7], [1.8, 0.6, 1.7], [4, 2, 2]],
            [0.0, 0.0, 0.0],
        ),
        GRID,
    )
    assert target[1].sum() == 1 and target[1, 13, 5] == 1
    assert target[2].sum() >= 1 and target[0].sum() == 0  # "other" is not a class group


def test_boxes_outside_the_grid_are_clipped_or_ignored():
    target = rasterise_cuboids(
        _boxes(["vehicle", "vehicle"], [[9.6, 0, 0], [50, 50, 0]], [[4, 2, 1], [4, 2, 1]], [0, 0]),
        GRID,
    )
    assert target[0].sum() == 4  # rows 18..19 of the first box only


def test_empty_and_inconsistent_cuboids():
    assert rasterise_cuboids({}, GRID).sum() == 0
    with pytest.raises(ValueError, match="disagree in length"):
        rasterise_cuboids(_boxes(["vehicle"], [[0, 0, 0], [1, 1, 1]], [[1, 1, 1]], [0]), GRID)
    with pytest.raises(ValueError, match="sizes must be > 0"):
        rasterise_cuboids(_boxes(["vehicle"], [[0, 0, 0]], [[0, 1, 1]], [0]), GRID)


def test_grid_rejects_extents_that_are_not_whole_cells():
    with pytest.raises(ValueError, match="whole number of cells"):
        BEVGrid(x_min=0, x_max=10.5, y_min=0, y_max=10, resolution=1.0)
    with pytest.raises(ValueError, match="resolution"):
        BEVGrid(x_min=0, x_max=10, y_min=0, y_max=10, resolution=0.0)
