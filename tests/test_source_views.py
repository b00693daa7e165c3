"""Several photos of one source person: the pose measure, the classical swapper's view choice
(with hysteresis), the identity check that leaves out another person's photos, and the
neural swappers' mean identity."""
from __future__ import annotations

import numpy as np
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.classic.source_views import SWITCH_FRAMES, SourceViews, ViewState, choose_view, view_for
from engines.classic.swapper import ClassicalSwapper
from engines.face import Face
from engines.frame_views import FrameViews
from engines.geometry.head_pose import HeadPose, head_pose
from engines.models.adapters import InSwapperSwapper, mean_identity
from engines.models.arcface import ArcFaceEmbedder
from engines.models.inswapper import InSwapper
from stream.analysis.identity_outliers import InconsistentViews, agreeing_views
from stream.media.demo_clips import astronaut
from tests.fixtures import make_arcface, make_inswapper
from tools.quality.clips import ASTRONAUT_FACE
from tools.quality.head_turn import turn_head

# --- the pose measure ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def astronaut_views() -> list[tuple[np.ndarray, np.ndarray]]:
    """The astronaut turned -25, 0 and +25 degrees (tools/quality/head_turn.py), with dlib's
    68 points of each."""
    from engines.dlib.detector import DlibHogDetector
    from engines.dlib.landmarker import DlibLandmarker

    det, lm = DlibHogDetector(1024), DlibLandmarker()
    out = []
    for yaw in (-25.0, 0.0, 25.0):
        image = turn_head(astronaut(), ASTRONAUT_FACE, yaw)
        frame = FrameViews(image)
        box = det.forward(frame)[0][0]
        out.append((image, lm.forward(frame, box)))
    return out


def test_yaw_follows_the_turn_and_its_side(astronaut_views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    left, front, right = (head_pose(points).yaw for _, points in astronaut_views)
    assert left < front - 0.1 < right - 0.2
    assert abs(front) < 0.05


def test_mirrored_points_read_the_opposite_yaw(astronaut_views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    _, points = astronaut_views[2]
    mirrored = points.copy()
    mirrored[:, 0] = 1000 - mirrored[:, 0]
    # dlib's layout mirrored: each point swaps with its partner on the other side
    partner = np.array([16 - i for i in range(17)] + [26 - i for i in range(10)] + list(range(27, 31))
                       + [35, 34, 33, 32, 31] + [45, 44, 43, 42, 47, 46, 39, 38, 37, 36, 41, 40]
                       + [54, 53, 52, 51, 50, 49, 48, 59, 58, 57, 56, 55, 64, 63, 62, 61, 60, 67, 66, 65])
    a, b = head_pose(points), head_pose(mirrored[partner])
    assert b.yaw == pytest.approx(-a.yaw, abs=1e-6)
    assert b.pitch == pytest.approx(a.pitch, abs=1e-6)


def test_degenerate_points_read_a_level_frontal_face() -> None:
    assert head_pose(np.zeros((68, 2), np.float32)) == HeadPose(0.0, 0.5, 0.0)


# --- the view choice ------------------------------------------------------------------------

THREE = SourceViews(("left", "front", "right"),  # type: ignore[arg-type]  # stand-ins: only the poses count
                    (HeadPose(-0.3, 0.55, 0.05), HeadPose(0.0, 0.55, 0.05), HeadPose(0.3, 0.55, 0.05)))


def _run(yaws: np.ndarray, mouth: float = 0.05) -> list[int]:
    state: ViewState | None = None
    chosen = []
    for yaw in yaws:
        state = choose_view(THREE, HeadPose(float(yaw), 0.55, mouth), state)
        chosen.append(state.current)
    return chosen


def _switches(chosen: list[int]) -> int:
    return sum(a != b for a, b in zip(chosen, chosen[1:]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_steady_face_keeps_its_view(seed: int) -> None:
    """A still face's points jitter by a frame's landmark noise: its view never changes."""
    rng = np.random.default_rng(seed)
    chosen = _run(0.05 + rng.normal(0, 0.02, 300))
    assert set(chosen) == {1}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_face_on_the_boundary_does_not_flip_between_views(seed: int) -> None:
    """Half-way between the front and the right view (yaw 0.15), jittering across the line
    on every other frame: without hysteresis it would change view about every other frame."""
    rng = np.random.default_rng(seed)
    yaws = 0.15 + rng.uniform(-0.035, 0.035, 300)
    nearest = [THREE.nearest(HeadPose(float(y), 0.55, 0.05)) for y in yaws]
    assert _switches(nearest) > 50  # what a choice without hysteresis does
    assert _switches(_run(yaws)) == 0


def test_a_turn_changes_the_view_once_and_promptly() -> None:
    yaws = np.concatenate([np.zeros(30), np.linspace(0, 0.4, 40), np.full(30, 0.4)])
    chosen = _run(yaws)
    assert _switches(chosen) == 1
    assert chosen[0] == 1 and chosen[-1] == 2
    # changed within SWITCH_FRAMES frames of the right view being better by the margin
    first_better = next(i for i, y in enumerate(yaws) if abs(y - 0.3) + 0.08 < abs(y))
    assert chosen.index(2) <= first_better + SWITCH_FRAMES


def test_the_mouth_counts_in_the_choice() -> None:
    views = SourceViews(("shut", "open"),  # type: ignore[arg-type]
                        (HeadPose(0.0, 0.55, 0.02), HeadPose(0.0, 0.55, 0.30)))
    assert views.nearest(HeadPose(0.0, 0.55, 0.25)) == 1
    assert views.nearest(HeadPose(0.0, 0.55, 0.05)) == 0


def test_a_face_without_a_track_gets_its_nearest_view_and_keeps_nothing() -> None:
    assert view_for(THREE, HeadPose(0.28, 0.55, 0.05), None) == "right"
    memo: dict = {}
    view_for(THREE, HeadPose(0.28, 0.55, 0.05), memo)
    assert memo and next(iter(memo.values())).current == 2


def test_a_face_given_another_source_chooses_afresh() -> None:
    state = None
    for _ in range(10):
        state = choose_view(THREE, HeadPose(0.0, 0.55, 0.05), state)
    other = SourceViews(("a", "b", "c"),  # type: ignore[arg-type]
                        (HeadPose(0.3, 0.55, 0.05), HeadPose(0.0, 0.55, 0.05), HeadPose(-0.3, 0.55, 0.05)))
    assert state is not None and state.current == 1
    state = choose_view(other, HeadPose(-0.3, 0.55, 0.05), state)
    assert state.current == 2 and state.of is other  # no hysteresis carried over from THREE


# --- the classical swapper with several views ------------------------------------------


def test_classical_swapper_warps_each_face_from_its_views_choice(
        astronaut_views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    swapper = ClassicalSwapper()
    views = swapper.prepare_views(astronaut_views)
    assert isinstance(views, SourceViews) and len(views.faces) == 3
    frame = astronaut_views[2][0]
    points = astronaut_views[2][1]
    rng = np.random.default_rng(5)
    memo: dict = {}
    used = []
    for _ in range(40):  # a steady face, a pixel of landmark noise a frame
        jittered = (points + rng.normal(0, 0.7, points.shape)).astype(np.float32)
        face = Face((0, 0, 1, 1), jittered, track_id=1, memo=memo)
        batch = swapper.prepare_batch(frame, [face], [views], {})
        used.append(batch.pairs[0][1])
    assert all(u is views.faces[2] for u in used)  # the right view, on every frame


def test_one_view_is_exactly_the_single_photo_path(astronaut_views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    swapper = ClassicalSwapper()
    image, points = astronaut_views[1]
    one, alone = swapper.prepare_views([(image, points)]), swapper.prepare_source(image, points)
    face = Face((0, 0, 1, 1), astronaut_views[2][1], track_id=1, memo={})
    a, b = swapper.forward(image, face, one), swapper.forward(image, face, alone)
    assert a is not None and b is not None
    assert a.region == b.region
    assert np.array_equal(a.patch, b.patch) and np.array_equal(a.valid, b.valid)


# --- which photos show one person -------------------------------------------------------------


def _people(rng: np.random.Generator, who: list[int], spread: float = 0.15) -> list[np.ndarray]:
    centres = rng.normal(0, 1, (4, 128))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)  # people about 1.4 apart
    return [(centres[p] + rng.normal(0, spread / np.sqrt(128), 128)).astype(np.float32) for p in who]


def _euclid(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b))


@pytest.mark.parametrize("who,kept", [
    ([0], (0,)),
    ([0, 0], (0, 1)),
    ([0, 0, 1], (0, 1)),
    ([1, 0, 0, 0], (1, 2, 3)),
    ([0, 1, 0, 2, 0], (0, 2, 4)),
])
def test_the_other_persons_photos_are_left_out(who: list[int], kept: tuple[int, ...]) -> None:
    agreement = agreeing_views(_people(np.random.default_rng(len(who)), who), _euclid, 0.6)
    assert agreement.kept == kept
    assert [i for i, _ in agreement.dropped] == [i for i in range(len(who)) if i not in kept]
    assert all(d >= 0.6 for _, d in agreement.dropped)


@pytest.mark.parametrize("who", [[0, 1], [0, 0, 1, 1], [0, 1, 2]])
def test_no_majority_of_one_person_is_refused(who: list[int]) -> None:
    with pytest.raises(InconsistentViews, match=f"no majority of the {len(who)} views"):
        agreeing_views(_people(np.random.default_rng(7), who), _euclid, 0.6)


# --- the neural swappers' mean identity ---------------------------------------------------------


@pytest.fixture(scope="module")
def neural(tmp_path_factory: pytest.TempPathFactory) -> InSwapperSwapper:
    folder = tmp_path_factory.mktemp("views-models")
    arc = ArcFaceEmbedder(OrtRuntime(make_arcface(folder / "w600k_r50.onnx", seed=4), RuntimeOptions(providers="cpu")))
    swap = InSwapper(OrtRuntime(make_inswapper(folder / "inswapper_128.onnx", seed=5), RuntimeOptions(providers="cpu")))
    adapter = InSwapperSwapper(swap, arc)
    adapter.open()
    return adapter


def test_mean_identity_weighs_each_view_alike() -> None:
    a, b = np.array([3.0, 0, 0], np.float32), np.array([0, 0.5, 0], np.float32)
    assert np.allclose(mean_identity([a, b]), [0.5, 0.5, 0])


def test_neural_source_is_the_mean_of_the_normalised_embeddings(
        neural: InSwapperSwapper, astronaut_views: list[tuple[np.ndarray, np.ndarray]]) -> None:
    embeddings = [neural.embedder.forward(image, points) for image, points in astronaut_views]
    expected = neural.swapper.prepare_source(
        np.mean([e / np.linalg.norm(e) for e in embeddings], axis=0))
    got = neural.prepare_views(astronaut_views)
    assert np.allclose(got, expected, atol=1e-6)
    assert np.linalg.norm(got) == pytest.approx(1.0, abs=1e-5)  # inswapper's latent: normed again
    # and one photo is exactly the single-photo path
    assert np.array_equal(neural.prepare_views(astronaut_views[:1]), neural.prepare_source(*astronaut_views[0]))
