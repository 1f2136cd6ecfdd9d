"""Suite-wide options. ``--fuzz-long``: run the differential fuzzer (tests/fuzz) with a large
budget instead of CI's small fixed one (see README, "Fuzzing")."""


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/fuzz with a large example budget (by hand; minutes)")
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples per fuzz test (overrides the CI and --fuzz-long budgets)")
    parser.addoption("--lucid-device", default="cpu",
                     help="the default device for the run: 'cpu', 'strict' (the CPU stand-in that "
                          "behaves like CuPy, NOTE [Strict stand-in device]) or 'cuda'")


def pytest_configure(config):
    dev = config.getoption("--lucid-device", default="cpu")
    if dev == "cpu":
        return
    import lucid

    if dev == "strict":
        from lucid.testing import strict_device

        strict_device.enable()
    lucid.set_default_device(dev)
