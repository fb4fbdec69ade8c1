import TestSupport

/// The old name of TestSupport's `LabCommandFailure`, for suites written before the namespaces
/// moved there (on other branches); declared in this module, so it wins over ReachabilityCLI's
/// own `CommandFailure` here as the old type did (kept here, not in TestSupport: there it would
/// collide with ReachabilityCLI's in the CLI's tests). New code says `LabCommandFailure`.
typealias CommandFailure = LabCommandFailure
