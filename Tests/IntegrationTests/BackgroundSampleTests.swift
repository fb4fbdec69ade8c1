import Foundation
import Testing
import TestSupport

/// The background samples as built: HalfTunesURLSession --background (quit, and the next launch
/// has the finished track and continues the other) and StormWatch (the WWDC pattern: a run whose
/// budget ends hands its request to the background session and exits; the agent starts it again
/// for the answer).
@Suite("Background samples", .serialized, .needsRoot,
       .needsNginx)
struct BackgroundSampleTests {
    @Test func halfTunesQuitsAndTheNextLaunchHasTheTracks() async throws {
        let lab = try BackgroundLab(files: ["small.mp3": 512 << 10, "long.mp3": 4 << 20], seed: 1801)
        defer { lab.close() }
        let music = lab.net.directory.file("music")
        // One connection per track: the test counts the requests (several would fetch long.mp3 in ranges).
        let arguments = [lab.url("small.mp3"), lab.url("long.mp3"), "-d", music.path, "--background", "--state-dir", lab.state.path,
                         "--connections", "1"]
        let first = try LineProcess("HalfTunesURLSession", arguments, namespace: lab.net.client)
        #expect(await first.waitForLine { $0 == "1. small.mp3: downloaded to \(music.appendingPathComponent("small.mp3").path)" } != nil,
                "\(first.transcript)")
        #expect(await first.waitForLine { $0.hasPrefix("2. long.mp3: ") && $0.contains("% of") } != nil, "\(first.transcript)")
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 130, "\(first.transcript)")
        // The agent goes on without it; the next launch continues long.mp3 instead of starting it again.
        let second = try LineProcess("HalfTunesURLSession", arguments, namespace: lab.net.client)
        #expect(await second.waitForExit(timeout: .seconds(30)) == 0, "\(second.transcript)")
        #expect(second.texts.contains("1. small.mp3: 100%, downloaded"), "\(second.transcript)")
        #expect(second.texts.contains("2. long.mp3: downloaded to \(music.appendingPathComponent("long.mp3").path)"), "\(second.transcript)")
        #expect(DownloadFixtures.sha256(fileAt: music.appendingPathComponent("long.mp3")) == lab.sha256("long.mp3"))
        #expect(lab.net.requests.count == 2, "each track fetched once: \(lab.net.requests)")
    }

    @Test func stormWatchAnswersWithinItsBudgetWithADataTaskThenUploadsThePhotoInTheBackground() async throws {
        let lab = try BackgroundLab(files: [:], seed: 1803)
        defer { lab.close() }
        try lab.net.serve(Data(#"{"stormy": false}"#.utf8), at: "forecast.json")
        let output = lab.net.directory.file("storm.txt")
        // Stormy's photo, uploaded after the forecast in the background session.
        let photo = lab.net.directory.file("sky.jpg")
        let picture = DownloadFixtures.randomData(count: 1 << 20, seed: 1804)
        try picture.write(to: photo)
        let run = try LineProcess("StormWatch", ["--url", lab.url("forecast.json"), "--budget", "10", "--output", output.path,
                                                 "--photo", photo.path, "--upload-url", lab.url("uploads/sky.jpg"),
                                                 "--state-dir", lab.state.path, "--agent", try BuiltProducts.url("reachability").path],
                                  namespace: lab.net.client)
        #expect(await run.waitForExit(timeout: .seconds(20)) == 0, "\(run.transcript)")
        #expect(run.texts.contains { $0.hasPrefix("stormy: no (fetched in the refresh") }, "\(run.transcript)")
        #expect(run.texts.contains("photo upload: handed to the background session"), "\(run.transcript)")
        // The agent sends the photo and starts the program again with the server's answer.
        let told = output.deletingLastPathComponent().appendingPathComponent("storm.txt-photo")
        #expect(await DownloadFixtures.wait(timeout: .seconds(30)) {
            ((try? String(contentsOf: told, encoding: .utf8)) ?? "").hasPrefix("photo upload: HTTP 201 (sent in the background")
        }, "\(lab.agentEvents("background", "launchFailed"))")
        #expect(DownloadFixtures.sha256(fileAt: lab.net.directory.file("www/uploads/sky.jpg")) == DownloadFixtures.sha256(picture))
        #expect(lab.agentEvents("background", "launching").count == 1)
        // The forecast, the upload's OPTIONS (does the server speak tus?) and the upload.
        #expect(lab.net.requests.count == 3, "\(lab.net.requests)")
    }

    @Test func stormWatchHandsItsRequestToTheBackgroundAndIsStartedForTheAnswer() async throws {
        let lab = try BackgroundLab(files: [:], seed: 1802)
        defer { lab.close() }
        // A forecast the 1 MB/s server needs 3 s for: longer than the refresh's budget.
        var forecast = Data(#"{"stormy": true}"#.utf8)
        forecast.append(Data(repeating: UInt8(ascii: " "), count: 3 << 20))
        try lab.net.serve(forecast, at: "forecast.json")
        let output = lab.net.directory.file("storm.txt")
        let run = try LineProcess("StormWatch", ["--url", lab.url("forecast.json"), "--budget", "1", "--output", output.path,
                                                 "--state-dir", lab.state.path, "--agent", try BuiltProducts.url("reachability").path,
                                                 "--connections", "1"],   // the 1 MB/s cap is per connection
                                  namespace: lab.net.client)
        #expect(await run.waitForExit(timeout: .seconds(20)) == 0, "\(run.transcript)")
        #expect(run.texts.contains { $0.contains("budget (1.0 s) ran out") }, "\(run.transcript)")
        #expect(await DownloadFixtures.wait(timeout: .seconds(30)) {
            ((try? String(contentsOf: output, encoding: .utf8)) ?? "").hasPrefix("stormy: yes (downloaded in the background")
        }, "\(lab.agentEvents("background", "launchFailed"))")
        #expect(lab.agentEvents("background", "launching").count == 1)
        // The WWDC code's two requests: the refresh's data(for:), cut off with it, and the
        // background session's download, which has the whole forecast.
        _ = await lab.bytesSent(afterRequests: 2)
        #expect(lab.net.requests.count == 2 && lab.net.requests.contains { $0.bytes == forecast.count },
                "the refresh's request, then the background one: \(lab.net.requests)")
    }
}
