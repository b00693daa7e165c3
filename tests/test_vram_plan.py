"""The VRAM plan on fake device figures, from a 2 GB card to an 80 GB one."""
from __future__ import annotations

import pytest

from stream.job.vram_plan import CARD_SHARE, DeviceMemory, GiB, MiB, PlanRequest, budget_for, parse_size, plan_vram

CARDS_GB = (2, 3, 4, 6, 8, 12, 16, 24, 40, 48, 80)


@pytest.mark.parametrize("gb", CARDS_GB)
@pytest.mark.parametrize("enhance", [False, True])
def test_every_plan_stays_under_85_percent_of_the_card(gb: int, enhance: bool) -> None:
    card = DeviceMemory(f"fake {gb} GB", gb * GiB, gb * GiB)
    plan = plan_vram(card, PlanRequest(enhancer="gfpgan_1.4" if enhance else None))
    assert plan.fits, plan.reason
    assert plan.estimate == sum(plan.items.values())
    assert plan.estimate <= CARD_SHARE * card.total
    assert plan.line().startswith(f"VRAM plan on fake {gb} GB: ")


def test_a_bigger_card_never_gets_a_worse_plan() -> None:
    rank = []
    for gb in CARDS_GB:
        plan = plan_vram(DeviceMemory("c", gb * GiB, gb * GiB), PlanRequest(enhancer="gfpgan_1.4"))
        rank.append((plan.precision == "fp32", plan.enhancer is not None, plan.batch, plan.workspace))
    assert rank == sorted(rank)
    assert rank[0] < rank[-1]  # the smallest card gave something up, the largest nothing
    big = plan_vram(DeviceMemory("c", 80 * GiB, 80 * GiB), PlanRequest(enhancer="gfpgan_1.4"))
    assert (big.precision, big.batch, big.enhancer, big.given_up) == ("fp32", 8, "gfpgan_1.4", [])


def test_cheapest_losses_go_first_and_are_named() -> None:
    card = DeviceMemory("small", 2 * GiB, 2 * GiB)
    plan = plan_vram(card, PlanRequest(enhancer="gfpgan_1.4"))
    assert plan.precision == "fp16" and "fp32" in plan.given_up
    assert plan.enhancer == "gfpgan_1.4"  # kept: smaller batches and workspace were enough
    assert plan.detector == "scrfd_10g"
    tiny = plan_vram(DeviceMemory("tiny", int(1.5 * GiB), int(1.5 * GiB)), PlanRequest(enhancer="gfpgan_1.4"))
    assert tiny.enhancer is None and "gfpgan_1.4" in tiny.given_up and "gave up" in tiny.line()


def test_720p_live_fits_in_a_1_5_gb_cap() -> None:
    card = DeviceMemory("H200", 139 * GiB, 138 * GiB)
    plan = plan_vram(card, PlanRequest(), max_vram=parse_size("1.5G"))
    assert plan.fits and plan.estimate <= 1.5 * GiB
    assert plan.detector == "scrfd_10g" and plan.batch >= 2


def test_what_is_free_now_bounds_the_plan() -> None:
    busy = DeviceMemory("busy 24 GB", 24 * GiB, 3 * GiB)  # another process holds most of it
    plan = plan_vram(busy, PlanRequest(enhancer="gfpgan_1.4"))
    assert budget_for(busy) < 3 * GiB and plan.estimate <= budget_for(busy)
    assert plan.given_up


@pytest.mark.parametrize("card, cap, names", [
    (DeviceMemory("tiny", 1 * GiB, 1 * GiB), None, "this card"),
    (DeviceMemory("big", 80 * GiB, 80 * GiB), 400 * MiB, "--max-vram"),
])
def test_a_plan_that_cannot_fit_says_so_in_one_line(card: DeviceMemory, cap: int | None, names: str) -> None:
    plan = plan_vram(card, PlanRequest(), max_vram=cap)
    assert not plan.fits
    line = plan.line()
    assert "\n" not in line and names in line and card.name in line and "needs" in line
    assert plan.detector == "scrfd_2.5g" and plan.batch == 1  # it tried the smallest set first


@pytest.mark.parametrize("text, value", [("1.5G", int(1.5 * GiB)), ("800M", 800 * MiB), ("2GB", 2 * GiB),
                                         ("1GiB", GiB), ("1048576", MiB)])
def test_sizes_are_read_as_users_write_them(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0"])
def test_a_bad_size_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)
