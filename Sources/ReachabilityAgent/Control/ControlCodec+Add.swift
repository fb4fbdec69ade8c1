import FoundationEssentials
import ResumableDownloads
import ReachabilityEvents

extension ControlCodec {
    /// `add`: an http or https URL, an absolute output path, a SHA-256, a client key, and the job's options.
    static func decodeAdd(_ request: ControlRequest) -> Result<ControlCommand, ControlError> {
        guard let url = downloadableURL(request.url) else {
            return .failure(.invalidArgument("add needs an http or https 'url'"))
        }
        if let output = request.output, !output.hasPrefix("/") {
            return .failure(.invalidArgument("'output' must be an absolute path"))
        }
        var digest: String?
        if let sha = request.sha256 {
            guard let normalized = SHA256.normalizedHexDigest(sha) else {
                return .failure(.invalidArgument("'sha256' must be 64 hex digits"))
            }
            digest = normalized
        }
        if let key = request.clientKey, !ControlProtocol.isValidClientKey(key) {
            return .failure(.invalidArgument(
                "'clientKey' must be 1 to \(ControlProtocol.maximumClientKeyLength) visible ASCII characters"))
        }
        return decodeJob(request).map { job in
            .add(url: url, output: request.output, sha256: digest,
                 replace: request.replace ?? false, clientKey: request.clientKey, job: job)
        }
    }

    /// The options of an `add` job: connections, priority, time limits, completion command, mirrors, pieces, proxy.
    static func decodeJob(_ request: ControlRequest) -> Result<QueueJobOptions, ControlError> {
        var job = QueueJobOptions(allowsConstrained: request.constrained ?? true, waitsForACPower: request.notOnBattery ?? false)
        if let connections = request.connections {
            let bound = DownloadAgent.maximumConnectionsPerHostLimit
            guard (1...bound).contains(connections) else {
                return .failure(.invalidArgument("'connections' must be 1 to \(bound)"))
            }
            job.connections = connections
        }
        if let name = request.priority {
            guard let priority = DownloadPriority(rawValue: name) else {
                let names = DownloadPriority.allCases.map(\.rawValue).joined(separator: ", ")
                return .failure(.invalidArgument("'priority' must be one of \(names)"))
            }
            job.priority = priority
        }
        switch decodeTimeLimits(request) {
        case .success(let limits): (job.deadline, job.noProgressTimeout) = limits
        case .failure(let error): return .failure(error)
        }
        if let argv = request.onComplete {
            if let problem = OnCompleteCommand.problem(with: argv) {
                return .failure(.invalidArgument(problem))
            }
            job.onComplete = argv
        }
        if let mirrors = request.mirrors {
            guard mirrors.count <= DownloadAgent.maximumMirrors else {
                return .failure(.invalidArgument("at most \(DownloadAgent.maximumMirrors) 'mirrors'"))
            }
            for text in mirrors {
                guard let mirror = downloadableURL(text) else {
                    return .failure(.invalidArgument("'mirrors' must be http or https URLs"))
                }
                job.mirrors.append(mirror)
            }
        }
        job.pieceHashes = request.pieces
        if let proxy = request.proxy, !proxy.isEmpty {
            do {
                job.proxy = try ProxyURL(proxy).text
            } catch {
                return .failure(.invalidArgument("'proxy' \(error.description)"))
            }
        } else {
            job.proxy = request.proxy
        }
        return .success(job)
    }
}
