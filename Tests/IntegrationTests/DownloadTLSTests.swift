import Foundation
import Testing
@testable import ResumableDownloads
import TestSupport

/// HTTPS through libcurl + OpenSSL against nginx with a throwaway self-signed certificate.
@Suite("Downloads over HTTPS", .serialized,
       .enabled(if: DownloadTestNginx.isTLSAvailable, "nginx or openssl is not installed"))
struct DownloadTLSTests: DownloadScenarios {

    @Test func downloadsOverTLSWithATrustedAuthority() async throws {
        let (nginx, directory, content) = try F.nginxServing(count: 4 << 20, seed: 21, at: "f.bin", tls: true)
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")) {
            $0.certificateAuthorityFile = nginx.certificate
        })
        let download = try await agent.download(from: nginx.tlsURL("f.bin"), to: directory.file("f.bin"),
                                                options: .init(expectedSHA256: F.sha256(content)))
        _ = try await F.finish(download)
        #expect(F.sha256(fileAt: directory.file("f.bin")) == F.sha256(content))
        await agent.shutdown()
    }

    @Test func untrustedCertificateFailsWithoutRetrying() async throws {
        let nginx = try DownloadTestNginx(tls: true)
        let directory = try F.Directory()
        try nginx.serve(Data("secret".utf8), at: "f.bin")
        let agent = try DownloadAgent(configuration: F.configuration(state: directory.file("state")))
        let download = try await agent.download(from: nginx.tlsURL("f.bin"), to: directory.file("f.bin"))
        do {
            _ = try await F.finish(download)
            Issue.record("expected a failure")
        } catch let error as DownloadError {
            #expect(error.urlErrorCode == .serverCertificateUntrusted)
            #expect(error.isResumable)   // installing the CA and resuming continues
            #expect(error.urlError().errorCode == -1202)
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("f.bin").path))
        await agent.shutdown()
    }
}
