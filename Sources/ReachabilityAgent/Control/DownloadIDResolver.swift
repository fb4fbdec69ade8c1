import FoundationEssentials

/// Finds a download by full ID or unique prefix (case-insensitive), like git's short hashes.
package enum DownloadIDResolver {
    package static func resolve(_ text: String, among ids: [UUID]) -> Result<UUID, ControlError> {
        let wanted = text.lowercased()
        let matches = ids.filter { $0.uuidString.lowercased().hasPrefix(wanted) }
        if let exact = ids.first(where: { $0.uuidString.lowercased() == wanted }) { return .success(exact) }
        switch matches.count {
        case 0: return .failure(.notFound(text))
        case 1: return .success(matches[0])
        default: return .failure(.ambiguous(text))
        }
    }
}
