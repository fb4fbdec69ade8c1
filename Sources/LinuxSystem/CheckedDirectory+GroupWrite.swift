/// Atomic writes of many small files at once (a group commit).
extension CheckedDirectory {
    /// `writeAtomically` for several files whose durability may be shared: every file is written
    /// to its own hidden temporary (created with `O_EXCL`, exactly `mode`) and its write-back
    /// started, then each is fsynced, renamed over its name, and the directory is fsynced once
    /// for all of them. Returns, per file in order, nil when it is in place and durable, or why not.
    ///
    /// Why: a file's fsync followed by the directory's costs two journal commits each (10-14 ms
    /// an add on the shared ext4 disk here, most of an add at 10,000 queued); started together,
    /// the first commit carries the others' data and metadata, so the later fsyncs find little
    /// left to do and the directory is committed once. Every file is still fsynced before its
    /// rename, as POSIX asks, whatever the file system.
    package func writeAtomically(group files: [(name: String, bytes: [UInt8])], mode: UInt32 = 0o600) -> [FileTrustError?] {
        var results = [FileTrustError?](repeating: nil, count: files.count)
        var opened: [(index: Int, temporary: String, file: FileDescriptor)] = []
        for (index, item) in files.enumerated() {
            let temporary = Self.uniqueTemporaryName(for: item.name)
            do throws(FileTrustError) {
                try Self.checkName(item.name, in: path)
                let file = try openOwnedFile(temporary, creating: .exclusive, mode: mode).descriptor
                do throws(Errno) {
                    try file.setPermissions(mode)
                    try file.writeAll(item.bytes)
                    // Not a barrier: lets the first fsync's commit find the others written.
                    try? file.startWriteBack(offset: 0, count: 0)
                } catch {
                    file.close()
                    try? remove(temporary)
                    throw .system(child(temporary), "write", error)
                }
                opened.append((index, temporary, file))
            } catch {
                results[index] = error
            }
        }
        var renamed: [Int] = []
        for entry in opened {
            do throws(FileTrustError) {
                do throws(Errno) {
                    // Closed exactly once, here (a second close could hit a reused number).
                    defer { entry.file.close() }
                    try entry.file.sync()
                } catch {
                    throw .system(child(entry.temporary), "write", error)
                }
                try rename(entry.temporary, to: files[entry.index].name, replacing: true)
                renamed.append(entry.index)
            } catch {
                try? remove(entry.temporary)
                results[entry.index] = error
            }
        }
        guard !renamed.isEmpty else { return results }
        do { try sync() } catch {
            // The renames may not survive a crash: none of them is reported durable.
            for index in renamed { results[index] = error }
        }
        return results
    }
}
