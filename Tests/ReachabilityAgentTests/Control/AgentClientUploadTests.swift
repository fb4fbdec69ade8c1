import Foundation
import Glibc
import LinuxSystem
import Testing
@testable import ReachabilityAgent
import TestSupport

/// `addUpload` carries the caller's open file to the agent (SCM_RIGHTS), so the agent reads what
/// the caller opened, not what a path names: through a real control server on a Unix socket.
@Suite("agent client uploads")
struct AgentClientUploadTests {
    @Test func theOpenFileTravelsWithTheRequest() async throws {
        let directory = try ScratchDirectory("acu", permissions: 0o700)
        let server = try AgentClientTests.server(in: directory)
        defer { server.stop() }
        let path = directory.path + "/photo.jpg"
        try Data(repeating: 7, count: 12_345).write(to: URL(fileURLWithPath: path))
        let file = try FileDescriptor.openForReading(path)
        defer { file.close() }
        // Renamed away before the request: the server still reads the file that was opened.
        try FileManager.default.moveItem(atPath: path, toPath: path + ".moved")
        let client = AgentClient(stateDirectory: directory.path)
        let request = UploadJobRequest(file: path, protocol: .tus)
        let reply = try await client.request(.addUpload(url: URL(string: "http://192.0.2.9/files/")!, request), passing: file)
        #expect(reply.download?.totalBytes == 12_345)
        #expect(reply.download?.direction == "upload")
        #expect(reply.download?.destination == path)

        await #expect(throws: AgentClientError.rejected) {
            _ = try await client.request(.addUpload(url: URL(string: "http://192.0.2.9/files/")!, request))
        }
    }

    @Test func addUploadOpensTheFileHereAndRefusesWhatCannotGo() async throws {
        let directory = try ScratchDirectory("acu-add", permissions: 0o700)
        let server = try AgentClientTests.server(in: directory)
        defer { server.stop() }
        let path = directory.path + "/sky.jpg"
        try Data(repeating: 3, count: 4_096).write(to: URL(fileURLWithPath: path))
        let client = AgentClient(stateDirectory: directory.path)
        let job = try await client.addUpload(fileAt: path, to: URL(string: "http://192.0.2.9/files/")!, protocol: .tus)
        #expect(job.totalBytes == 4_096 && job.direction == "upload" && job.destination == path)
        // Refused here, before the agent hears of them.
        let fifo = directory.path + "/pipe"
        #expect(mkfifo(fifo, 0o600) == 0)
        for (bad, words) in [(fifo, "only regular files"), (directory.path, "only regular files"), (directory.path + "/missing", "cannot open")] {
            do {
                _ = try await client.addUpload(fileAt: bad, to: URL(string: "http://192.0.2.9/files/")!)
                Issue.record("\(bad) was accepted")
            } catch {
                #expect(error == .rejected && error.agentCode == .invalidArgument && error.message.contains(words), "\(bad): \(error)")
            }
        }
        await #expect(throws: AgentClientError.rejected) {
            _ = try await client.addUpload(fileAt: path, to: URL(string: "http://192.0.2.9/files/")!, method: "P U T")
        }
    }

    @Test func uploadRequestsAreChecked() {
        func decode(_ line: String) -> Result<(ControlRequestID?, ControlCommand), ControlRejection> {
            ControlCodec.decodeRequest(Array(line.utf8))
        }
        let good = #"{"version":1,"id":1,"command":"addUpload","url":"http://h/u","upload":{"file":"/a/b","protocol":"tus"}}"#
        guard case .success(let (_, command)) = decode(good), case .addUpload(let url, let upload) = command else {
            Issue.record("a valid addUpload was refused")
            return
        }
        #expect(url.absoluteString == "http://h/u")
        #expect(upload.protocolChoice == .tus && upload.requestMethod == .post)
        for bad in [#"{"version":1,"command":"addUpload","url":"ftp://h/u","upload":{"file":"/a","protocol":"tus"}}"#,
                    #"{"version":1,"command":"addUpload","url":"http://h/u","upload":{"file":"a/b","protocol":"tus"}}"#,
                    #"{"version":1,"command":"addUpload","url":"http://h/u","upload":{"file":"/a","protocol":"smtp"}}"#,
                    #"{"version":1,"command":"addUpload","url":"http://h/u","upload":{"file":"/a","protocol":"put","method":"P U T"}}"#,
                    #"{"version":1,"command":"addUpload","url":"http://h/u"}"#] {
            guard case .failure(let rejection) = decode(bad) else {
                Issue.record("accepted: \(bad)")
                continue
            }
            #expect(rejection.error.code == .invalidArgument)
        }
    }
}
