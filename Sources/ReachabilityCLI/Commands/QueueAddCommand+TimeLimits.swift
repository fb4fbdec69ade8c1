import ReachabilityAgent

/// `queue add --deadline` and `--no-progress-timeout` (issue 32 item 5).
extension QueueAddCommand {
    static let deadline = Option.value(
        "deadline", valueName: "seconds",
        help: "Fail the job if it is not done this many seconds after it was added (BITS' MaxDownloadTime), whatever it is doing; its bytes and resume record are kept.")
    static let noProgressTimeout = Option.value(
        "no-progress-timeout", valueName: "seconds",
        help: "Fail the job after this many seconds without a byte, counted from its first transient error or lost path and reset by each byte (BITS' NoProgressTimeout); its bytes and resume record are kept.")
}
