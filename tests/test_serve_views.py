"""The page of `facestream serve` takes several photos of one person as one face: the upload
(multipart field `photo`, repeated), what it says, and what it refuses."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest

from engines.classic.source_views import SourceViews
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut
from stream.server.app import MAX_UPLOAD_VIEWS, FaceServer
from tests.fixtures.serving import serve, shared_serve_job
from tools.quality.clips import ASTRONAUT_FACE, t1_source
from tools.quality.head_turn import turn_head


@pytest.fixture(scope="module")
def shared_job(source_photo: Path) -> SwapJob:
    return shared_serve_job(source_photo)


def _png(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def _views(*yaws: float) -> list[tuple[str, bytes]]:
    return [(f"astronaut{yaw:.0f}.png", _png(turn_head(astronaut(), ASTRONAUT_FACE, yaw))) for yaw in yaws]


async def _upload(url: str, photos: list[tuple[str, bytes]]) -> tuple[int, dict[str, Any]]:
    form = aiohttp.FormData()
    for name, data in photos:
        form.add_field("photo", data, filename=name, content_type="application/octet-stream")
    async with aiohttp.ClientSession() as http, http.post(f"{url}api/faces", data=form) as r:
        return r.status, await r.json()


def _serve(job: SwapJob, photos: list[tuple[str, bytes]]) -> tuple[int, dict[str, Any], FaceServer]:
    async def scenario(server: FaceServer, url: str) -> tuple[int, dict[str, Any], FaceServer]:
        status, body = await _upload(url, photos)
        return status, body, server

    return serve(job, scenario)


def test_several_photos_make_one_face(shared_job: SwapJob) -> None:
    status, body, server = _serve(shared_job, _views(0.0, -25.0, 25.0))
    assert status == 200, body
    assert body["name"] == "astronaut0.png +2"
    assert body["note"] == "3 photos of one person"
    entry = server.library.entries[body["id"]]
    assert isinstance(entry.prepared, SourceViews) and len(entry.prepared.faces) == 3


def test_another_persons_photo_is_left_out_and_said(shared_job: SwapJob) -> None:
    notes = list(shared_job.notes)
    status, body, _ = _serve(shared_job, _views(0.0, 25.0, -25.0) + [("someone.png", _png(t1_source()))])
    assert status == 200, body
    assert body["note"].startswith("3 photos of one person; left out someone.png ("), body
    assert shared_job.notes == notes  # said to the uploader, not piled up on the server


def test_a_photo_without_a_face_is_skipped_and_said(shared_job: SwapJob) -> None:
    grey = ("grey.png", _png(np.full((200, 200, 3), 128, np.uint8)))
    status, body, _ = _serve(shared_job, _views(0.0, 25.0) + [grey])
    assert status == 200, body
    assert body["note"] == "2 photos of one person; no face in grey.png"


@pytest.mark.parametrize("photos,status,needle", [
    (lambda: _views(0.0) + [("someone.png", _png(t1_source()))], 422, "no majority of the 2 views"),
    (lambda: [("a.png", _png(np.full((200, 200, 3), 90, np.uint8))),
              ("b.png", _png(np.full((200, 200, 3), 160, np.uint8)))], 422, "no face found in any of them"),
    (lambda: _views(*([0.0] * (MAX_UPLOAD_VIEWS + 1))), 413, f"up to {MAX_UPLOAD_VIEWS}"),
], ids=["two-people", "no-face", "too-many"])
def test_bad_uploads_are_one_line(shared_job: SwapJob, photos, status: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    got, body, _ = _serve(shared_job, photos())
    assert got == status, body
    assert needle in body["error"] and "\n" not in body["error"]
