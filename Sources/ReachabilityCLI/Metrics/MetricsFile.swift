import Foundation

/// `--metrics-file PATH`: replaced whole on every write, the way node_exporter's textfile
/// collector needs it (a reader sees the old file or the new one, never half of one).
///
/// The directory is opened and checked once, at start, and every later call is relative to that
/// descriptor (`openat`/`renameat`), so renaming or swapping the directory path afterwards
/// cannot redirect the writes. Each write creates a fresh temporary file next to the target
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`: never an existing file or a planted link), writes, fsyncs,
/// renames it over the target and fsyncs the directory. `rename` replaces a symlink or hard link
/// at the target's name, never the file it points to.
///
/// Refused at start: a directory writable by every user (even with the sticky bit, like /tmp):
/// another user could create the name first, or (without the sticky bit) replace the file
/// between writes and feed node_exporter numbers of their choosing. Also refused: a directory
/// owned by another user (not root), who could do the same. Group-writable directories are
/// accepted: their group is the administrator's choice.
final class MetricsFile: Sendable {
    /// The path as given (absolute), for messages.
    let path: String
    /// The directory part, for messages.
    let directory: String
    /// The file's name inside the directory.
    let name: String
    /// What a user should know but that does not stop the tool (a name node_exporter skips).
    let warnings: [String]
    /// The checked directory, open for the life of this object (closed in deinit: nothing else
    /// owns it and every use is synchronous).
    private let directoryDescriptor: Int32

    /// Opens and checks the directory; throws `CommandFailure` (exit 73) with the reason.
    init(path: String, effectiveUserID: UInt32) throws {
        let url = URL(fileURLWithPath: path)
        let name = url.lastPathComponent
        guard !path.hasSuffix("/"), !name.isEmpty, name != ".", name != "..", name != "/" else {
            throw Self.failure("--metrics-file \(path) names a directory; give a file name such as reachability.prom")
        }
        let directory = url.deletingLastPathComponent().path
        self.path = path
        self.name = name
        self.directory = directory

        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw Self.failure("cannot use --metrics-file \(path): cannot open its directory \(directory): \(Self.errnoText())")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let text = Self.errnoText()
            close(descriptor)
            throw Self.failure("cannot use --metrics-file \(path): cannot stat \(directory): \(text)")
        }
        let mode = String(info.st_mode & 0o7777, radix: 8)
        if info.st_mode & S_IWOTH != 0 {
            close(descriptor)
            throw Self.failure("refusing --metrics-file \(path): \(directory) is writable by every user (mode \(mode)), so another user could put their own file in its place; use a directory only you or root can write, such as /var/lib/node_exporter/textfile_collector")
        }
        if info.st_uid != effectiveUserID, info.st_uid != 0 {
            close(descriptor)
            throw Self.failure("refusing --metrics-file \(path): \(directory) belongs to uid \(info.st_uid), who could replace the file; use a directory owned by you or root")
        }
        var existing = stat()
        if fstatat(descriptor, name, &existing, AT_SYMLINK_NOFOLLOW) == 0, existing.st_mode & S_IFMT == S_IFDIR {
            close(descriptor)
            throw Self.failure("cannot use --metrics-file \(path): it is a directory")
        }
        directoryDescriptor = descriptor
        warnings = name.hasSuffix(".prom") ? []
            : ["--metrics-file \(path): node_exporter's textfile collector reads only files whose names end in .prom"]
    }

    deinit { close(directoryDescriptor) }

    /// Replaces the file's contents with `text`; throws `CommandFailure` (exit 74) with the step that failed.
    func write(_ text: String) throws {
        // A name node_exporter skips (no .prom suffix), hidden, and short enough for NAME_MAX.
        let temporary = ".\(name.prefix(200)).\(String(UInt64.random(in: 0...UInt64.max), radix: 16)).tmp"
        let descriptor = openat(directoryDescriptor, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw writeFailure("cannot create a temporary file in \(directory)") }
        var isRenamed = false
        defer {
            if !isRenamed { unlinkat(directoryDescriptor, temporary, 0) }
        }
        do {
            defer { close(descriptor) }
            var bytes = Array(text.utf8)
            try bytes.withUnsafeMutableBytes { try writeAll(to: descriptor, UnsafeRawBufferPointer($0)) }
            bytes = []
            // 0644 whatever the umask: node_exporter runs as its own user and must read the file.
            guard fchmod(descriptor, 0o644) == 0 else { throw writeFailure("cannot set the mode of \(path)") }
            guard fsync(descriptor) == 0 else { throw writeFailure("cannot write \(path)") }
        } catch let error as CommandFailure {
            throw error
        } catch {
            throw Self.failure("cannot write \(path): \(error)", exitCode: .ioError)
        }
        guard renameat(directoryDescriptor, temporary, directoryDescriptor, name) == 0 else {
            throw writeFailure("cannot rename the temporary file to \(path)")
        }
        isRenamed = true
        // The rename itself must survive a crash, or a reader finds the old file after reboot.
        _ = fsync(directoryDescriptor)
    }

    private func writeFailure(_ what: String) -> CommandFailure {
        Self.failure("\(what): \(Self.errnoText())", exitCode: .ioError)
    }

    private static func failure(_ message: String, exitCode: ExitCode = .cannotCreate) -> CommandFailure {
        CommandFailure(message: message, exitCode: exitCode)
    }

    private static func errnoText() -> String { String(cString: strerror(errno)) }
}
