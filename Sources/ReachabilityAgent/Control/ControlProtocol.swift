/// The agent's control protocol: one JSON object per line in each direction, over the Unix
/// socket in the state directory.
///
/// Request: `{"version":1,"id":7,"command":"add","url":"http://...","output":"/abs/file","sha256":"..."}`
/// (`command` is one of `add`, `list`, `pause`, `resume`, `cancel`, `status`, `metrics`; `pause`/`resume`/`cancel`
/// take `"download":"ID or unique prefix"`; `metrics` takes an optional `"format":"openmetrics"|"prometheus"`). Reply: `{"version":1,"id":7,"ok":true,...}` or
/// `{"version":1,"id":7,"ok":false,"error":{"code":"...","message":"..."}}`. `add` takes an optional
/// `"clientKey"`: an add repeated with a key the same user already used is answered with that
/// first job (a client retrying after a reset cannot queue a download twice).
/// Requests may be pipelined: every line written gets its reply, in order.
/// Everything here is pure (no sockets), so it is unit tested directly.
package enum ControlProtocol {
    /// The only version spoken; a request with another one gets `unsupportedVersion`.
    package static let version = 1
    /// Longest request line accepted; longer ones are answered with `tooLarge` and skipped.
    /// An `add` of a Metalink carries its piece hashes (67 bytes each in JSON: 64 KiB held fewer
    /// than 1,000, a 1 GiB file in 1 MiB pieces) and mirrors: room for `PieceFile.maximumCount`
    /// hashes and the most mirrors. Only the agent's own user (or root) may send one, and each
    /// connection reads one line at a time, so this bounds what one of that user's connections holds.
    package static let maximumRequestSize = 12 << 20
    /// The `rows` a `list` may ask for (`queue list` asks for 100 unless `--all`).
    package static let listRows = 1...1_000_000
    /// Longest `clientKey` accepted.
    package static let maximumClientKeyLength = 128

    /// Whether `key` can be an `add`'s client key: 1 to `maximumClientKeyLength` visible ASCII
    /// characters (it shows up in logs).
    package static func isValidClientKey(_ key: String) -> Bool {
        let bytes = key.utf8
        return !bytes.isEmpty && bytes.count <= maximumClientKeyLength && bytes.allSatisfy { (0x21...0x7e).contains($0) }
    }
}
