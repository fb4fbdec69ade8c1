// `Logger` and `SignalHandlers` are part of this library's public API (a monitor's
// configuration takes a logger; programs that follow a monitor install signal handlers) but
// live in ReachabilityBase, which every module of the package shares. Re-exported, so
// `import LinuxReachability` keeps bringing them, as NIO's umbrella module re-exports NIOCore.
@_exported import ReachabilityBase
