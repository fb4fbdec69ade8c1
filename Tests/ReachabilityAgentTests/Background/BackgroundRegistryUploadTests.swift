import Foundation
import Testing
@testable import ReachabilityAgent
import ResumableDownloads

/// A background session's upload tasks in the registry (issue 28): never joined to another
/// task's transfer, their start carries the file, their end carries the server's response (kept
/// until acknowledged, also for a launch), and a cancel asking for resume data hands where the
/// server holds the upload, or says why none comes; a task made from that resume data starts
/// from it.
@Suite("Background registry: upload tasks")
struct BackgroundRegistryUploadTests {
    typealias Tests = BackgroundRegistryTests

    static func upload(_ identifier: Int) -> BackgroundTaskSpec {
        var spec = Tests.spec(identifier, "http://192.0.2.1/files/")
        spec.upload = BackgroundUploadSpec(file: "/home/me/sky-\(identifier).jpg", method: "POST")
        spec.upload?.identity = UploadFileIdentity(size: 4096, modified: 1, device: 2, inode: UInt64(identifier))
        return spec
    }

    @Test func twoUploadsToOneURLAreTwoTransfersCarryingTheirFiles() throws {
        var (registry, transfers) = try Tests.attached(tasks: [Self.upload(1), Self.upload(2)])
        var starts: [BackgroundRegistry.TransferStart] = []
        for identifier in [1, 2] {
            let performed = try registry.perform(.resume, on: identifier, in: Tests.key, connection: 1, now: Tests.now,
                                                 availableBytes: Tests.plenty).get()
            starts += Tests.starts(performed.actions)
            registry.transferStarted(transfers[identifier - 1])
        }
        #expect(starts.map(\.id) == transfers, "each upload its own transfer, never joined")
        #expect(starts.map { $0.upload?.file } == ["/home/me/sky-1.jpg", "/home/me/sky-2.jpg"])
        let snapshot = try #require(registry.sessions[Tests.key]?.task(1)?.snapshot(waitingReason: nil))
        #expect(snapshot.isUpload == true && snapshot.totalBytes == 4096 && snapshot.uploadFile == "/home/me/sky-1.jpg")
    }

    @Test func theServersResponseIsKeptWithTheEventUntilAcknowledged() throws {
        var (registry, transfers) = try Tests.attached(tasks: [Self.upload(1)])
        _ = try registry.perform(.resume, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        registry.transferStarted(transfers[0])
        // Where the server holds it is written before more is sent (an agent restart asks it).
        let resume = UploadResumeState(url: URL(string: "http://192.0.2.1/files/")!, uploadURL: URL(string: "http://192.0.2.1/files/7")!,
                                       protocolInUse: .tus, acknowledgedOffset: 0, length: 4096,
                                       file: UploadFileIdentity(size: 4096, modified: 1, device: 2, inode: 1), filePath: "/home/me/sky-1.jpg")
        #expect(registry.uploadHeld(transfers[0], resume) == [.persist(Tests.key)])
        #expect(registry.transferStart(of: transfers[0])?.uploadResume == resume)
        // The program is gone when the server answers: the event waits, and the program is launched.
        _ = registry.detach(1, now: Tests.now)
        let response = BackgroundUploadResponse(statusCode: 201, headers: ["location": "/files/7"], body: Data("stored\n".utf8))
        let actions = registry.transferCompleted(transfers[0], now: Tests.now, response: response)
        #expect(actions.contains(.persist(Tests.key)) && actions.contains {
            if case .launch = $0 { true } else if case .wake = $0 { true } else { false }
        }, "on disk, and a launch now or when the launch policy allows: \(actions)")
        let pending = try #require(registry.sessions[Tests.key]?.record.pending.first)
        #expect(pending.kind == .finished && pending.response == response)
        // The relaunched program gets it once, and acknowledges it.
        let (_, replay) = try registry.attach(Tests.key, settings: Tests.settings(), connection: 2, pid: 43, now: Tests.now).get()
        #expect(Tests.delivered(replay) == [pending.sequence])
        _ = try registry.acknowledge(Tests.key, sequence: pending.sequence, connection: 2).get()
        #expect(registry.sessions[Tests.key]?.record.pending.isEmpty == true)
    }

    @Test func aBodyLargerThanTheBoundIsCutAndSaysSo() {
        let response = BackgroundUploadResponse(statusCode: 200, headers: [:],
                                                body: Data(count: BackgroundUploadResponse.maximumBodyLength + 1))
        #expect(response.body.count == BackgroundUploadResponse.maximumBodyLength && response.isBodyTruncated)
    }

    static let held = UploadResumeState(url: URL(string: "http://192.0.2.1/files/")!, uploadURL: URL(string: "http://192.0.2.1/files/7")!,
                                        protocolInUse: .tus, acknowledgedOffset: 1024, length: 4096,
                                        file: UploadFileIdentity(size: 4096, modified: 1, device: 2, inode: 1), filePath: "/home/me/sky-1.jpg")

    @Test func cancellingForResumeDataBeforeTheServerHoldsItSaysWhyThereIsNone() throws {
        var (registry, transfers) = try Tests.attached(tasks: [Self.upload(1)])
        _ = try registry.perform(.resume, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        registry.transferStarted(transfers[0])
        let performed = try registry.perform(.cancelProducingResumeData, on: 1, in: Tests.key, connection: 1, now: Tests.now,
                                             availableBytes: Tests.plenty).get()
        #expect(performed.awaitsStop == nil && performed.resumeState == nil)
        #expect(performed.actions.contains(.cancelTransfer(transfers[0])), "\(performed.actions)")
        let failure = try #require(registry.sessions[Tests.key]?.record.pending.first?.failure)
        #expect(failure.code == -999 && failure.message.contains("no resume data") && failure.uploadResume == nil)
    }

    @Test func cancellingForResumeDataHandsWhereTheServerHoldsIt() throws {
        var (registry, transfers) = try Tests.attached(tasks: [Self.upload(1)])
        _ = try registry.perform(.resume, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        registry.transferStarted(transfers[0])
        _ = registry.uploadHeld(transfers[0], Self.held)
        let performed = try registry.perform(.cancelProducingResumeData, on: 1, in: Tests.key, connection: 1, now: Tests.now,
                                             availableBytes: Tests.plenty).get()
        // The transfer stops before the event is applied: the server's offset is settled when it is asked.
        let cancelAt = try #require(performed.actions.firstIndex(of: .cancelTransfer(transfers[0])), "\(performed.actions)")
        let deliverAt = performed.actions.firstIndex { if case .deliver = $0 { true } else { false } }
        #expect(deliverAt.map { $0 > cancelAt } == true, "\(performed.actions)")
        let failure = try #require(registry.sessions[Tests.key]?.record.pending.first?.failure)
        #expect(failure.code == -999 && failure.uploadResume == Self.held)
        // A plain cancel hands nothing.
        var (plain, plainTransfers) = try Tests.attached(tasks: [Self.upload(1)])
        _ = try plain.perform(.resume, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        plain.transferStarted(plainTransfers[0])
        _ = plain.uploadHeld(plainTransfers[0], Self.held)
        _ = try plain.perform(.cancel, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        #expect(plain.sessions[Tests.key]?.record.pending.first?.failure?.uploadResume == nil)
    }

    @Test func aTaskFromResumeDataStartsFromWhereTheServerHoldsIt() throws {
        var spec = Self.upload(1)
        spec.upload?.resume = Self.held
        var (registry, transfers) = try Tests.attached(tasks: [spec])
        let performed = try registry.perform(.resume, on: 1, in: Tests.key, connection: 1, now: Tests.now, availableBytes: Tests.plenty).get()
        let start = try #require(Tests.starts(performed.actions).first)
        #expect(start.id == transfers[0] && start.uploadResume == Self.held, "the agent asks that resource its offset")
    }

    /// `timeoutIntervalForResource` running out stops the transfer (the server keeps what it
    /// took): the -1001 carries where the server holds the upload, as a failure does.
    @Test func theResourceTimeoutHandsWhereTheServerHoldsTheUpload() throws {
        var (registry, transfers) = try Tests.runningWithAResourceTimeout(Self.upload(1))
        _ = registry.uploadHeld(transfers[0], Self.held)
        #expect(registry.timerFired(now: Tests.now.addingTimeInterval(60), availableBytes: Tests.plenty).contains(.stopTransfer(transfers[0])))
        _ = registry.transferStopped(transfers[0], resumeState: nil, now: Tests.now)
        let failure = try #require(registry.sessions[Tests.key]?.record.pending.first?.failure)
        #expect(failure.code == -1001 && failure.uploadResume == Self.held, "\(failure)")
    }

    @Test func uploadSpecsAreChecked() {
        var relative = Self.upload(1)
        relative.upload?.file = "sky.jpg"
        #expect(relative.problem?.contains("absolute") == true)
        var badMethod = Self.upload(1)
        badMethod.upload?.method = "P O S T"
        #expect(badMethod.problem?.contains("method") == true)
        #expect(Self.upload(1).problem == nil)
        // Resume data must be for this file and URL, with offsets in bounds.
        var otherFile = Self.upload(1)
        otherFile.upload?.file = "/home/me/other.jpg"
        otherFile.upload?.resume = Self.held
        #expect(otherFile.problem?.contains("another file") == true)
        var otherURL = Self.upload(1)
        otherURL.url = "http://192.0.2.9/files/"
        otherURL.upload?.resume = Self.held
        #expect(otherURL.problem?.contains("another URL") == true)
        var beyond = Self.upload(1)
        beyond.upload?.resume = Self.held
        beyond.upload?.resume?.acknowledgedOffset = 5000
        #expect(beyond.problem?.contains("out of bounds") == true)
        var plainProtocol = Self.upload(1)
        plainProtocol.upload?.resume = Self.held
        plainProtocol.upload?.resume?.protocolInUse = .put
        #expect(plainProtocol.problem?.contains("without resumption") == true)
    }
}
