"""The overview's charts: y-axes a person can read, stepping by 1, 2 or 5 x 10^n (docs/api.md,
"The console")."""

from __future__ import annotations

import itertools
import re

import pytest

from layang.domain.overview import PERIODS, Chart, Series
from layang.web.charts import axis_ticks, line_chart, stacked_bars

NICE = {factor * 10**power for power in range(8) for factor in (1, 2, 5)}


@pytest.mark.parametrize(
    ("largest", "ticks"),
    [
        (0, (0, 1)),
        (1, (0, 1)),
        (3, (0, 1, 2, 3)),
        (5, (0, 1, 2, 3, 4, 5)),
        (7, (0, 2, 4, 6, 8)),
        (10, (0, 2, 4, 6, 8, 10)),
        (11, (0, 5, 10, 15)),
        (37, (0, 10, 20, 30, 40)),
        (1234, (0, 500, 1000, 1500)),
    ],
)
def test_ticks_step_by_one_two_or_five_times_a_power_of_ten(largest, ticks):
    assert axis_ticks(largest) == ticks


def test_every_axis_starts_at_zero_reaches_the_top_and_steps_evenly():
    for largest in [*range(0, 2001), 99_999, 123_456, 10**7 + 1]:
        ticks = axis_ticks(largest)
        step = ticks[1]
        assert ticks[0] == 0 and step in NICE, (largest, ticks)
        assert all(b - a == step for a, b in itertools.pairwise(ticks))
        assert ticks[-1] >= largest and ticks[-1] - step < max(largest, 1), (largest, ticks)
        assert 2 <= len(ticks) <= 6, (largest, ticks)


def y_labels(svg: str) -> list[int]:
    """The y-axis labels of a chart, bottom to top, as a person reads them."""
    found = re.findall(r'<text class="axis"[^>]*text-anchor="end">([\d,]+)</text>', svg)
    return [int(label.replace(",", "")) for label in found]


@pytest.mark.parametrize("draw", [line_chart, stacked_bars])
@pytest.mark.parametrize("largest", [3, 5, 10, 70])
def test_every_chart_labels_its_axis_with_those_ticks(draw, largest):
    period = PERIODS["24h"]
    values = tuple(largest if i == 5 else i % 2 for i in range(24))
    chart = Chart(
        period, tuple(i * period.step_ms for i in range(24)), (Series("sent", "Sent", values),)
    )
    labels = y_labels(str(draw(chart, "Activity")))
    assert labels == list(axis_ticks(largest)), labels
    step = labels[1]
    assert step in NICE and all(b - a == step for a, b in itertools.pairwise(labels))
