import ReachabilityBase
import ResumableDownloads

/// Test and benchmark knobs read from the environment (not in `--help`: production defaults are
/// the right ones for people): `REACHABILITY_DOWNLOAD_STALL_TIMEOUT`, `..._CONNECT_TIMEOUT`
/// (seconds), `REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES` and `..._MAX_FAILURES` (the failure budget).
/// Read once, before anything starts: a bad value stops the command (exit 78) and says so.
struct DownloadTuning: Sendable, Equatable {
    static let stallTimeoutValue = EnvironmentValue("REACHABILITY_DOWNLOAD_STALL_TIMEOUT", Seconds.positive(upTo: .seconds(86_400)))
    static let connectTimeoutValue = EnvironmentValue("REACHABILITY_DOWNLOAD_CONNECT_TIMEOUT", Seconds.positive(upTo: .seconds(86_400)))
    static let checkpointBytesValue = EnvironmentValue("REACHABILITY_DOWNLOAD_CHECKPOINT_BYTES", ByteCount(1...(1 << 40)))
    static let maximumFailuresValue = EnvironmentValue("REACHABILITY_DOWNLOAD_MAX_FAILURES", Count(0...1_000_000))

    var stallTimeout: Duration?
    var connectTimeout: Duration?
    var checkpointBytes: Int64?
    var maximumFailures: Int?

    init(context: CommandContext) throws {
        stallTimeout = try Self.stallTimeoutValue.value(in: context)
        connectTimeout = try Self.connectTimeoutValue.value(in: context)
        checkpointBytes = try Self.checkpointBytesValue.value(in: context)
        maximumFailures = try Self.maximumFailuresValue.value(in: context)
    }

    func apply(to configuration: inout DownloadAgent.Configuration) {
        if let stallTimeout { configuration.stallTimeout = stallTimeout }
        if let connectTimeout { configuration.connectTimeout = connectTimeout }
        if let checkpointBytes {
            // A test asking for a checkpoint every N bytes gets exactly that, however fast.
            configuration.checkpointInterval = checkpointBytes
            configuration.checkpointSpacing = .zero
        }
        if let maximumFailures { configuration.maximumConsecutiveFailures = maximumFailures }
    }
}
