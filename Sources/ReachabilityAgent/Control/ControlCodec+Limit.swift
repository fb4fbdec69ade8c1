import ReachabilityBase

extension ControlCodec {
    /// `limit`'s value: `none`, or bytes per second in the range `limit-rate=` takes (digits, or
    /// `4m`-style as the command line spells it).
    static func decodeLimit(_ request: ControlRequest) -> Result<ControlCommand, ControlError> {
        guard let text = request.limit else { return .failure(.invalidArgument("limit needs a 'limit' (bytes per second, or none)")) }
        if text == "none" { return .success(.limit(nil)) }
        do {
            return .success(.limit(try AgentRateLimitPolicy.rate.parse(text)))
        } catch {
            return .failure(.invalidArgument("'limit': \(error.description), got '\(text)'"))
        }
    }
}
