// The shared vocabulary (event lines, JSON values, metric families and `MetricsFormat`, the
// state-directory resolver, `AgentFailure`) lives in ReachabilityEvents, below both the agent
// and the CLI's `download`. `MetricsFormat` is part of `AgentClient`'s public API and
// ResumableURLSession resolves its directory with `StateDirectoryLocation`: re-exported, so
// `import ReachabilityAgent` keeps bringing them, as LinuxReachability re-exports ReachabilityBase.
@_exported import ReachabilityEvents
