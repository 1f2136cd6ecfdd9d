"""Suite-wide options. ``--fuzz-long``: run the differential fuzzer (tests/fuzz) with a large
budget instead of CI's small fixed one (see README, "Fuzzing")."""


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/fuzz with a large example budget (by hand; minutes)")
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples per fuzz test (overrides the CI and --fuzz-long budgets)")
