import Foundation
import ResumableDownloads

/// The resume data of an upload task: upload28's `UploadResumeState` (where the server keeps
/// the partial upload, the offset it acknowledged, the protocol, which file) as JSON, framed and
/// authenticated as download resume data is (`ResumeData.sealed`) under its own magic.
///
///     "RCHUPLOAD"  9 bytes   magic
///     version      1 byte    1
///     length       4 bytes   big-endian length of the JSON payload
///     payload      length    UploadResumeState (sorted keys)
///     mac          32 bytes  HMAC-SHA256 of everything before it, keyed by the state directory
///
/// The MAC matters more here than for downloads: the payload names a file and a server, so a
/// forged blob must never make a session send some other file somewhere else.
enum UploadResumeData {
    static let magic = Array("RCHUPLOAD".utf8)
    static let version: UInt8 = 1

    /// `state` sealed with `key`.
    static func encoded(_ state: UploadResumeState, key: [UInt8]) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return ResumeData.sealed(try encoder.encode(state), magic: magic, version: version, key: key)
    }

    /// The state in `data`, authenticated with `key` and validated; throws `ResumeDataError`.
    static func decode(_ data: Data, key: [UInt8]) throws -> UploadResumeState {
        let payload = try ResumeData.unsealed(data, magic: magic, version: version, key: key, foreignHint: foreignFormatHint)
        let state: UploadResumeState
        do {
            state = try JSONDecoder().decode(UploadResumeState.self, from: payload)
        } catch {
            throw ResumeDataError.malformed.with("upload resume data payload does not decode: \(error)")
        }
        do {
            try state.validate()
        } catch {
            throw ResumeDataError.malformed.with("invalid upload resume data: \(error.description)")
        }
        guard state.filePath.hasPrefix("/"), !state.filePath.utf8.contains(0) else {
            throw ResumeDataError.malformed.with("invalid upload resume data: the file is not named by an absolute path")
        }
        return state
    }

    private static func foreignFormatHint(_ bytes: [UInt8]) -> String {
        if bytes.starts(with: ResumeData.magic) {
            return "this is a download task's resume data: pass it to downloadTask(withResumeData:)"
        }
        if bytes.isEmpty { return "the upload resume data is empty" }
        return "the data is not upload resume data from ResumableURLSession"
    }
}
