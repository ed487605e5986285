//! Opening a possibly compressed file as one decompressed stream, by magic bytes.
//!
//! Corpora ship as `.tar.gz` (`aclImdb_v1.tar.gz`), `.tar.xz` or plain files. The
//! compression is told from the first bytes, not the file name: gzip (`1f 8b`,
//! multi-member streams included) through `flate2`, xz (`fd 37 7a 58 5a 00`,
//! concatenated streams included) through `xz2`, anything else as is. The
//! returned [`Compressed::offset`] counter says how many compressed bytes have
//! been read so far, so that an error on a truncated archive can say where.
//!
//! ```
//! use std::io::{Read, Write};
//! use mechlab_corpora::archive::{open_decompressed, Compression};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("a.gz");
//! let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), Default::default());
//! gz.write_all(b"hello").unwrap();
//! gz.finish().unwrap();
//! let (mut reader, info) = open_decompressed(&path).unwrap();
//! let mut s = String::new();
//! reader.read_to_string(&mut s).unwrap();
//! assert_eq!((s.as_str(), info.compression), ("hello", Compression::Gzip));
//! assert!(info.offset() > 0);
//! ```

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::rc::Rc;

use crate::error::CorpusError;

/// The compression of a file, told from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Xz,
}

impl Compression {
    /// Tells the compression from a file's first (up to 6) bytes.
    pub fn sniff(head: &[u8]) -> Self {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else {
            Compression::None
        }
    }
}

/// What [`open_decompressed`] found, with a live count of compressed bytes read.
#[derive(Debug, Clone)]
pub struct Compressed {
    pub compression: Compression,
    read: Rc<Cell<u64>>,
}

impl Compressed {
    /// Compressed bytes read from the file so far (decoders read ahead, so this
    /// is where the stream was, not the exact failing byte).
    pub fn offset(&self) -> u64 {
        self.read.get()
    }
}

struct Counting<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// Opens `path` and returns a reader of its decompressed bytes.
pub fn open_decompressed(path: &Path) -> Result<(Box<dyn Read>, Compressed), CorpusError> {
    let mut file = File::open(path).map_err(|e| CorpusError::io(path, e))?;
    let mut head = [0u8; 6];
    let mut n = 0;
    while n < head.len() {
        match file
            .read(&mut head[n..])
            .map_err(|e| CorpusError::io(path, e))?
        {
            0 => break,
            k => n += k,
        }
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| CorpusError::io(path, e))?;
    let compression = Compression::sniff(&head[..n]);
    let read = Rc::new(Cell::new(0));
    let counted = BufReader::with_capacity(
        1 << 16,
        Counting {
            inner: file,
            read: read.clone(),
        },
    );
    let reader: Box<dyn Read> = match compression {
        Compression::None => Box::new(counted),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(counted)),
        Compression::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(counted)),
    };
    Ok((reader, Compressed { compression, read }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn xz_round_trip_and_truncation_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.xz");
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut xz = xz2::write::XzEncoder::new(File::create(&path).unwrap(), 6);
        xz.write_all(&data).unwrap();
        xz.finish().unwrap();
        let (mut r, info) = open_decompressed(&path).unwrap();
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        assert_eq!((back == data, info.compression), (true, Compression::Xz));

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (mut r, _) = open_decompressed(&path).unwrap();
        assert!(r.read_to_end(&mut Vec::new()).is_err());
    }

    #[test]
    fn plain_files_pass_through_and_missing_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.txt");
        std::fs::write(&path, "abc").unwrap();
        let (mut r, info) = open_decompressed(&path).unwrap();
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!((s.as_str(), info.compression), ("abc", Compression::None));
        let e = open_decompressed(&dir.path().join("nope")).err().unwrap();
        assert!(matches!(e, CorpusError::NotFound { .. }));
    }
}
