# The two commands of the README: `make demo` and `make test`. Both create the virtual
# environment (.venv) and install the project into it on first use, with the `demo` extra
# (the packages the demo pictures ship in) and the test tools, at the versions of the lock
# (constraints.txt: what the suite last passed with). `make LOCK= test` installs from
# pyproject.toml's ranges instead (the newest releases they admit). `make test` runs the
# whole suite (as CI does) and lists its 25 slowest tests; `make test-fast` leaves out the
# tests marked slow (`@pytest.mark.slow`: a second or more each, live servers, browsers) to
# run in under 3 minutes while you change code, and lists its 10 slowest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK ?= constraints.txt
PIP_LOCK := $(if $(LOCK),-c $(LOCK),)

.PHONY: demo test test-fast test-deps triton-env check-install lint lock bench docs install clean \
	image image-deps image-test

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools $(PIP_LOCK)
	$(BIN)/python -m pip install --quiet $(PIP_LOCK) $(if $(LOCK),--build-constraint $(LOCK),) -e '.[demo,test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/facestream demo

test: $(STAMP)
	-@$(MAKE) --no-print-directory test-deps || echo "note: RTSP server or Chromium not installed; the tests that need them will be skipped"
	-@$(MAKE) --no-print-directory triton-env || echo "note: the Triton server environment could not be built; the Triton tests will say why"
	FACESTREAM_LOCK=$(LOCK) $(BIN)/python -m pytest -q --durations=25

test-fast: $(STAMP)
	FACESTREAM_LOCK=$(LOCK) $(BIN)/python -m pytest -q -m "not slow" --durations=10

# System packages the live tests need: a real RTSP server (GStreamer's, through the system
# Python) and a real browser for the WebRTC page (Chromium, driven by Playwright from the
# venv; no browser download), and Debian's ffmpeg (an independent reader of our outputs, and
# the maker of inputs PyAV cannot write, such as subtitles). Debian/Ubuntu, as root or with sudo.
SYSTEM_TEST_PACKAGES := python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-bad chromium ffmpeg
test-deps:
	@if /usr/bin/python3 -c "import gi; gi.require_version('GstRtspServer', '1.0')" 2>/dev/null \
		&& [ -x /usr/bin/chromium ] && [ -x /usr/bin/ffmpeg ]; then \
		echo "test servers: installed"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(SYSTEM_TEST_PACKAGES); \
	fi

# The Triton server's own environment (nvidia-pytriton's bundled tritonserver; it pins
# numpy<2, so not in .venv): built once from tools/triton/requirements.txt with pip, cached
# under ~/.cache/facestream (or $$FACESTREAM_TRITON_ENV); the Triton tests start it.
triton-env: $(STAMP)
	$(BIN)/python tools/triton/env.py

# A normal (non-editable) install into a fresh venv, every command run from it (CI runs it).
check-install: $(STAMP)
	LOCK=$(LOCK) tools/check_install.sh

# Resolve the locks anew (the newest releases pyproject.toml and tools/triton/requirements.txt
# admit), then run the whole suite against them: commit the new locks only if it passes.
lock:
	tools/lock.sh
	$(MAKE) --no-print-directory test

lint: $(STAMP)
	$(BIN)/ruff check stream engines tools tests

bench: $(STAMP)
	$(BIN)/python tools/bench.py

# The docs/ pages as a site (mkdocs.yml), strictly: a broken link between pages fails the build.
# (Not --quiet: mkdocs then drops the warnings before strict mode counts them.)
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# The CPU image (deploy/Containerfile), built with podman and no container registry or package
# index: the base (Debian bookworm, debootstrap) and the wheels (the lock's, cached under
# ~/.cache/facestream/wheelhouse) are made here. Tags localhost/facestream:<version> and :latest.
# `make image-deps` installs podman and its kin (apt-get), and podman's settings for this
# project (deploy/containers.conf: runc; the ulimits a container may have where containers may
# not raise their limits) as a drop-in that every podman command reads, so a plain
# `podman run --rm localhost/facestream:latest doctor` works after `make image`. As root or with
# sudo, as `make test-deps`. `make image-test` runs the image for real (tests/test_image.py).
SYSTEM_IMAGE_PACKAGES := podman runc catatonit debootstrap uidmap fuse-overlayfs slirp4netns
PODMAN_SETTINGS := /etc/containers/containers.conf.d/50-facestream.conf
image-deps:
	@if command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
		&& command -v catatonit >/dev/null; then \
		echo "image tools: installed"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(SYSTEM_IMAGE_PACKAGES); \
	fi
	@if cmp -s deploy/containers.conf $(PODMAN_SETTINGS); then \
		echo "podman settings: $(PODMAN_SETTINGS)"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO install -D -m 644 deploy/containers.conf $(PODMAN_SETTINGS) && \
		echo "podman settings: deploy/containers.conf installed as $(PODMAN_SETTINGS)"; \
	fi

image: $(STAMP) image-deps
	PYTHON=$(BIN)/python tools/deploy/image.sh

image-test: $(STAMP) image-deps
	FACESTREAM_IMAGE_TEST=1 $(BIN)/python -m pytest -q -m image tests/test_image.py tests/test_kubernetes.py

clean:
	rm -rf $(VENV) facestream-demo site
