// Foundation's URLSession upload, as a Linux port of an iOS app would send a file: one
// `uploadTask(with:fromFile:)` PUT, and on an error the whole file again from zero after a second
// (swift-corelibs-foundation has no resumable uploads), up to RETRIES times.
// Built by bench/upload_bench.py (swiftc -O); usage: foundation_upload FILE URL [RETRIES]
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

let arguments = CommandLine.arguments
guard arguments.count >= 3, let url = URL(string: arguments[2]) else {
    FileHandle.standardError.write(Data("usage: foundation_upload FILE URL [RETRIES]\n".utf8))
    exit(64)
}
let file = URL(fileURLWithPath: arguments[1])
let retries = arguments.count > 3 ? Int(arguments[3]) ?? 30 : 30
let configuration = URLSessionConfiguration.default
// A dead link is noticed by the request timeout, as on iOS (60 s by default; 5 s here, as short as
// an app would dare for a large upload's idle time).
configuration.timeoutIntervalForRequest = 5
let session = URLSession(configuration: configuration)

func attempt() -> (Int?, String?) {
    var request = URLRequest(url: url)
    request.httpMethod = "PUT"
    let done = DispatchSemaphore(value: 0)
    let outcome = Mutex<(Int?, String?)>((nil, nil))
    let task = session.uploadTask(with: request, fromFile: file) { _, response, error in
        outcome.withLock { $0 = ((response as? HTTPURLResponse)?.statusCode, error.map { "\($0)" }) }
        done.signal()
    }
    task.resume()
    done.wait()
    return outcome.withLock { $0 }
}

for tryNumber in 0...retries {
    let (status, error) = attempt()
    if error == nil, let status, (200..<300).contains(status) { exit(0) }
    FileHandle.standardError.write(Data("attempt \(tryNumber + 1): \(error ?? "status \(status ?? 0)")\n".utf8))
    Thread.sleep(forTimeInterval: 1)
}
exit(1)
