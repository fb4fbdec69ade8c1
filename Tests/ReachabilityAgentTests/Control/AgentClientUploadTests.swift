import Foundation
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
