"""The exceptions tensorfem raises, each with the message the command line would print."""


class Error(Exception):
    """Any error of tensorfem."""


class ConfigError(Error, ValueError):
    """Settings that cannot be used (a mesh, boundary or solver keyword): every problem,
    each named by its config key (docs/configuration.md)."""


class InputError(Error, ValueError):
    """Data that cannot be solved: a wrong shape or dtype, a value that is not finite, a
    pure Neumann load that is not compatible, a problem too large for this machine."""


class DeviceError(Error, RuntimeError):
    """The device asked for is not there, or the method does not run on it."""


class VerificationError(Error, RuntimeError):
    """A solved column's f64 residual missed its tolerance: no solution is returned."""
