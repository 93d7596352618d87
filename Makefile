# smarm — thin entry points. Everything real lives in CMake.
#   make run        install missing packages, build, start the main program
#   make test       install missing packages, build, run the whole suite (ctest)
#   make test-tsan  the suite under ThreadSanitizer
#   make test-asan  the suite under AddressSanitizer + UBSan
#   make bench      runtime microbenchmarks vs Go (ratios; see README)
#   make compare    smarm-server vs nginx vs Go under smarm-load (loadtest/compare)
#   make image      the container image (docker, else podman/buildah)
#   make test-image build it, run it, probe /healthz and /metrics
#   make soak       kv 90/10 at 80% of peak for DURATION (default 1h)

BUILD      ?= build/release
JOBS       ?= $(shell nproc)
CTEST_ARGS ?=

APT_PACKAGES   := cmake g++ make libboost-context1.81-dev libboost1.81-dev libgtest-dev \
                  libspdlog-dev libssl-dev libyaml-cpp-dev libcli11-dev zlib1g-dev prometheus-cpp-dev clang libclang-rt-14-dev \
                  libgmock-dev libbenchmark-dev spin python3 python3-yaml gnuplot-nox libpq-dev \
                  libnghttp2-dev pkg-config
# Only `make test` needs the browser (the observer page's test), curl and a
# PostgreSQL server (the postgres client's tests start their own) and
# python3-websockets (the WebSocket interop and chat tests' client),
# python3-h2 (the HTTP/2 conformance client) and nghttp2-client (nghttp,
# h2load: HTTP/2 interop and the benchmark).
TEST_PACKAGES  := chromium chromium-driver python3-selenium curl postgresql python3-websockets \
                  python3-h2 nghttp2-client openssl
# Only `make bench` / `make compare` need the peers and strace.
BENCH_PACKAGES := golang-go strace nginx-light wrk golang-github-jackc-pgx-v4-dev postgresql \
                  node-ws golang-golang-x-net-dev h2o nghttp2-client
# Only the image targets need these (podman runs without a daemon here;
# prometheus scrapes the running image as compose's Prometheus would).
IMAGE_PACKAGES := podman buildah mmdebstrap uidmap runc prometheus

.PHONY: all deps configure build run test test-tsan test-asan bench compare fuzz image test-image soak clean

all: build

deps:
	@./scripts/install-deps.sh $(APT_PACKAGES)

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@$(BUILD)/services/smarm-server --config config/smarm.yaml

test: build
	@./scripts/install-deps.sh $(TEST_PACKAGES)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-tsan: deps
	@cmake --preset tsan >/dev/null && cmake --build build/tsan -j $(JOBS)
	@cd build/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -LE "nosan|fuzz" $(CTEST_ARGS)

test-asan: deps
	@cmake --preset asan >/dev/null && cmake --build build/asan -j $(JOBS)
	@cd build/asan && ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
	  ctest --output-on-failure -j $(JOBS) -LE "nosan|fuzz" $(CTEST_ARGS)

# libFuzzer over the HTTP request path (clang, build/fuzz); FUZZ_TIME seconds.
FUZZ_TIME ?= 300
fuzz: deps
	@./scripts/fuzz.sh $(FUZZ_TIME)

bench: build
	@./scripts/install-deps.sh $(BENCH_PACKAGES)
	@python3 loadtest/runtime/compare.py $(BUILD)
	@python3 loadtest/io/compare_echo.py $(BUILD)

compare: build
	@./scripts/install-deps.sh $(BENCH_PACKAGES)
	@python3 loadtest/compare --build $(BUILD)

image:
	@./scripts/install-deps.sh $(IMAGE_PACKAGES)
	@./scripts/image.sh build

test-image:
	@./scripts/install-deps.sh $(IMAGE_PACKAGES)
	@./scripts/image.sh test

# The reliability soak (tests/reliability/soak_test.py); ctest runs 60 s.
DURATION ?= 1h
soak: build
	@python3 tests/reliability/soak_test.py $(BUILD)/services/smarm-server config/smarm.yaml \
	  $(BUILD)/loadtest/load/smarm-load --duration $(DURATION) --samples $(BUILD)/soak.csv

clean:
	@rm -rf build
