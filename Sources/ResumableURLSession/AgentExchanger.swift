import Foundation
import ResumableDownloads

/// Data tasks' exchanges on the session's engine: placeholder until the engine's one-shot
/// exchange is merged; every request fails with the reason.
struct AgentExchanger: DataExchanger {
    let agent: DownloadAgent

    func start(_ request: DataExchangeRequest, events: @escaping @Sendable (DataExchangeEvent) -> Void) -> any DataExchange {
        events(.finished(.init(code: .unsupportedURL, description: "this build has no one-shot exchange for data tasks")))
        return NoExchange()
    }

    private struct NoExchange: DataExchange {
        func cancel() {}
    }
}
