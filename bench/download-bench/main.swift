// download-bench: downloads one URL with ResumableDownloads and prints time and throughput.
// Used by bench/download.sh to compare against `curl -o` under /usr/bin/time -v.
import Foundation
import ResumableDownloads

let arguments = CommandLine.arguments
guard arguments.count >= 3, let url = URL(string: arguments[1]) else {
    FileHandle.standardError.write(Data("usage: download-bench URL DESTINATION [--sha256 HEX] [--state DIR] [--checkpoint-mib N]\n".utf8))
    exit(64)
}
let destination = URL(fileURLWithPath: arguments[2])
var expectedSHA256: String?
var stateDirectory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("download-bench-\(getpid())")
var checkpointMiB: Int64 = 16
var index = 3
while index + 1 < arguments.count {
    switch arguments[index] {
    case "--sha256": expectedSHA256 = arguments[index + 1]
    case "--state": stateDirectory = URL(fileURLWithPath: arguments[index + 1])
    case "--checkpoint-mib": checkpointMiB = Int64(arguments[index + 1]) ?? 16
    default: break
    }
    index += 2
}

let started = ContinuousClock.now
do {
    let bytes = try await withDownloadAgent(configuration: .init(stateDirectory: stateDirectory,
                                                                         checkpointInterval: checkpointMiB << 20)) { agent in
        let download = try await agent.download(from: url, to: destination, options: .init(expectedSHA256: expectedSHA256))
        _ = try await download.finished()
        return download.progress.bytesReceived
    }
    let elapsed = ContinuousClock.now - started
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(String(format: "bytes=%lld seconds=%.3f MiB/s=%.1f", bytes, seconds, Double(bytes) / seconds / 1_048_576))
    try? FileManager.default.removeItem(at: stateDirectory)
} catch {
    FileHandle.standardError.write(Data("download-bench: \(error)\n".utf8))
    exit(1)
}
