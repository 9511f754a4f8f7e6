package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// The structure of a bbolt file, checked without bbolt.
//
// bbolt trusts its file: it reads pages straight from a memory map, and a
// damaged page makes it panic, or fault on an address past the end of the
// file, and a fault is not even a panic that can be recovered. Worse, its
// own consistency check (Tx.Check) runs in a goroutine of its own, where a
// panic cannot be recovered by the caller at all. So before bbolt touches a
// raft.db, checkBoltFile walks the file's pages with plain reads and
// checks everything bbolt's opening and Tx.Check rely on to stay in bounds:
// the meta pages, that the file holds every page the meta page counts, the
// free list page, and every page of every bucket's tree (each page where it
// says it is, of the type it must be, referenced once, its elements and
// their keys and values inside the page). What remains for Tx.Check is the
// consistency of a well-formed file: pages both used and free, pages
// neither, keys out of order.
//
// The layout is bbolt's file format version 2 (bbolt 1.3 and 1.4), in the
// byte order of the machine, as bbolt writes it.

const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltPageHeader  = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	boltBucketSize  = 16 // root u64, sequence u64
	boltMetaSize    = 64 // magic, version, page size, flags, root bucket (16), free list, pgid, txid, checksum
	boltNoFreelist  = ^uint64(0)

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01
)

var ne = binary.NativeEndian

type boltMeta struct {
	pageSize uint64
	root     uint64 // page of the root bucket's tree
	freelist uint64
	pgid     uint64 // high water mark: pages 0 … pgid-1 are in use or free
	txid     uint64
}

// parseBoltMeta decodes and validates the meta page whose data (after the
// page header) is b.
func parseBoltMeta(b []byte) (boltMeta, error) {
	if len(b) < boltMetaSize {
		return boltMeta{}, errors.New("short meta page")
	}
	if ne.Uint32(b[0:]) != boltMagic {
		return boltMeta{}, errors.New("not a bbolt meta page")
	}
	if v := ne.Uint32(b[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("bbolt file format version %d, want %d", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(b[:56])
	if h.Sum64() != ne.Uint64(b[56:]) {
		return boltMeta{}, errors.New("meta page checksum mismatch")
	}
	return boltMeta{
		pageSize: uint64(ne.Uint32(b[8:])),
		root:     ne.Uint64(b[16:]),
		freelist: ne.Uint64(b[32:]),
		pgid:     ne.Uint64(b[40:]),
		txid:     ne.Uint64(b[48:]),
	}, nil
}

// boltFile is a bbolt file being checked.
type boltFile struct {
	f    io.ReaderAt
	size uint64
	meta boltMeta
	seen []uint64 // bitmap of the pages found in use so far
	buf  []byte
}

// checkBoltFile checks the structure of the bbolt file at path (see above).
// It only reads the file, and it reads each page once: its cost grows with
// the size of the file, and it holds one bit per page.
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return errors.New("the file is empty")
	}
	bf := &boltFile{f: f, size: uint64(fi.Size())}
	if err := bf.readMeta(); err != nil {
		return err
	}
	return bf.walk()
}

// readMeta picks the meta page bbolt would use: of the two, the valid one
// with the higher transaction id.
func (bf *boltFile) readMeta() error {
	// The page size is in the first meta page; when that one is damaged,
	// bbolt looks for the second one at every page size it supports.
	pageSize := uint64(0)
	var buf [boltPageHeader + boltMetaSize]byte
	if _, err := bf.f.ReadAt(buf[:], 0); err == nil {
		if m, err := parseBoltMeta(buf[boltPageHeader:]); err == nil {
			pageSize = m.pageSize
		}
	}
	for i := 0; pageSize == 0 && i <= 14; i++ {
		pos := uint64(1024) << i
		if pos+uint64(len(buf)) > bf.size {
			break
		}
		if _, err := bf.f.ReadAt(buf[:], int64(pos)); err == nil {
			if m, err := parseBoltMeta(buf[boltPageHeader:]); err == nil && m.pageSize == pos {
				pageSize = m.pageSize
			}
		}
	}
	if pageSize == 0 {
		return errors.New("neither meta page is valid: not a bbolt file, or both meta pages are damaged")
	}
	if pageSize < 1024 || pageSize > 1<<24 || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("the meta page gives a page size of %d bytes", pageSize)
	}
	if bf.size < 2*pageSize {
		return fmt.Errorf("the file is %d bytes, shorter than its two meta pages", bf.size)
	}
	var metas [2]*boltMeta
	var errs [2]error
	for i := range metas {
		if _, err := bf.f.ReadAt(buf[:], int64(uint64(i)*pageSize)); err != nil {
			errs[i] = err
			continue
		}
		m, err := parseBoltMeta(buf[boltPageHeader:])
		if err == nil && m.pageSize != pageSize {
			err = fmt.Errorf("page size %d, the other meta page says %d", m.pageSize, pageSize)
		}
		if errs[i] = err; err == nil {
			metas[i] = &m
		}
	}
	m := metas[0]
	if m == nil || (metas[1] != nil && metas[1].txid > m.txid) {
		m = metas[1]
	}
	if m == nil {
		return fmt.Errorf("neither meta page is valid (%v; %v)", errs[0], errs[1])
	}
	bf.meta = *m
	if m.pgid < 2 || m.pgid > bf.size/pageSize {
		return fmt.Errorf("the file is %d bytes but its meta page counts %d pages of %d bytes: it was truncated", bf.size, m.pgid, pageSize)
	}
	bf.seen = make([]uint64, (m.pgid+63)/64)
	bf.buf = make([]byte, pageSize)
	return nil
}

// mark records pages id … id+n-1 as used; a page used twice is damage.
func (bf *boltFile) mark(id, n uint64) error {
	for p := id; p < id+n; p++ {
		if bf.seen[p/64]&(1<<(p%64)) != 0 {
			return fmt.Errorf("page %d is used twice", p)
		}
		bf.seen[p/64] |= 1 << (p % 64)
	}
	return nil
}

// page reads the first page of the run of pages that starts at page id
// into bf.buf, and checks that it lies within the file, says it is page id,
// and was not seen before. It returns the page's type, element count and
// overflow count (the run is overflow+1 pages).
func (bf *boltFile) page(id uint64) (flags uint16, count, overflow uint64, err error) {
	m := bf.meta
	if id < 2 || id >= m.pgid {
		return 0, 0, 0, fmt.Errorf("page %d is referenced but the file has pages 2 to %d only", id, m.pgid-1)
	}
	if _, err := bf.f.ReadAt(bf.buf, int64(id*m.pageSize)); err != nil {
		return 0, 0, 0, fmt.Errorf("page %d: %w", id, err)
	}
	if got := ne.Uint64(bf.buf[0:]); got != id {
		return 0, 0, 0, fmt.Errorf("page %d holds page %d", id, got)
	}
	flags = ne.Uint16(bf.buf[8:])
	count = uint64(ne.Uint16(bf.buf[10:]))
	overflow = uint64(ne.Uint32(bf.buf[12:]))
	if overflow >= m.pgid-id {
		return 0, 0, 0, fmt.Errorf("page %d runs %d pages past the end of the file", id, overflow+1-(m.pgid-id))
	}
	return flags, count, overflow, bf.mark(id, overflow+1)
}

// readRun returns n bytes at offset off of the run of pages that starts at
// page id, from bf.buf when they are in its first page.
func (bf *boltFile) readRun(id, off, n uint64) ([]byte, error) {
	if off+n <= uint64(len(bf.buf)) {
		return bf.buf[off : off+n], nil
	}
	b := make([]byte, n)
	if _, err := bf.f.ReadAt(b, int64(id*bf.meta.pageSize+off)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return b, nil
}

func (bf *boltFile) walk() error {
	m := bf.meta
	if err := bf.mark(0, 2); err != nil {
		return err
	}
	if m.freelist == boltNoFreelist {
		// bbolt would rebuild the free list in a goroutine of its own that
		// panics on the first inconsistency; raft-boltdb always writes one.
		return errors.New("the file has no free list page")
	}
	if err := bf.checkFreelist(); err != nil {
		return err
	}
	// Every bucket's tree, depth first; a page seen twice ends the walk, so
	// a cycle cannot make it loop.
	stack := []uint64{m.root}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		children, err := bf.checkTreePage(id)
		if err != nil {
			return err
		}
		stack = append(stack, children...)
	}
	return nil
}

func (bf *boltFile) checkFreelist() error {
	m := bf.meta
	flags, count, overflow, err := bf.page(m.freelist)
	if err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	if flags != boltFreelistPage {
		return fmt.Errorf("free list page %d has type %#x", m.freelist, flags)
	}
	run := (overflow + 1) * m.pageSize
	start := uint64(boltPageHeader)
	if count == 0xFFFF {
		// The real count is the first element.
		count = ne.Uint64(bf.buf[boltPageHeader:])
		start += 8
	}
	if count > (run-start)/8 {
		return fmt.Errorf("free list page %d counts %d free pages, more than it can hold", m.freelist, count)
	}
	const chunk = 4096
	for done := uint64(0); done < count; {
		n := min(count-done, chunk)
		b, err := bf.readRun(m.freelist, start+done*8, n*8)
		if err != nil {
			return fmt.Errorf("free list: %w", err)
		}
		for i := uint64(0); i < n; i++ {
			if id := ne.Uint64(b[i*8:]); id < 2 || id >= m.pgid {
				return fmt.Errorf("free list page %d lists page %d, outside pages 2 to %d", m.freelist, id, m.pgid-1)
			}
		}
		done += n
	}
	return nil
}

// checkTreePage checks a branch or leaf page of a bucket's tree and
// returns the pages it refers to: a branch page's children, the roots of
// the buckets a leaf page holds.
func (bf *boltFile) checkTreePage(id uint64) ([]uint64, error) {
	m := bf.meta
	flags, count, overflow, err := bf.page(id)
	if err != nil {
		return nil, err
	}
	if flags != boltBranchPage && flags != boltLeafPage {
		return nil, fmt.Errorf("page %d has type %#x where a branch or leaf page belongs", id, flags)
	}
	run := (overflow + 1) * m.pageSize
	if boltPageHeader+count*boltElementSize > run {
		return nil, fmt.Errorf("page %d counts %d elements, more than it can hold", id, count)
	}
	if flags == boltBranchPage && count == 0 {
		return nil, fmt.Errorf("branch page %d is empty", id)
	}
	elems, err := bf.readRun(id, boltPageHeader, count*boltElementSize)
	if err != nil {
		return nil, err
	}
	var refs []uint64
	for i := uint64(0); i < count; i++ {
		e := elems[i*boltElementSize:]
		at := boltPageHeader + i*boltElementSize // the element's offset in the page
		if flags == boltBranchPage {
			pos, ksize := uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
			if ksize == 0 || at+pos+ksize > run {
				return nil, fmt.Errorf("page %d: key %d lies outside the page", id, i)
			}
			refs = append(refs, ne.Uint64(e[8:]))
			continue
		}
		ref, err := bf.checkLeafElement(e, at, run, func(off, n uint64) ([]byte, error) { return bf.readRun(id, off, n) })
		if err != nil {
			return nil, fmt.Errorf("page %d: element %d: %w", id, i, err)
		}
		if ref != 0 {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// checkLeafElement checks the leaf element e at offset at of a page of
// size bytes. When the element is a bucket, it returns the bucket's root
// page, or checks the bucket's inline page when it has none (0).
func (bf *boltFile) checkLeafElement(e []byte, at, size uint64, read func(off, n uint64) ([]byte, error)) (uint64, error) {
	flags := ne.Uint32(e[0:])
	pos, ksize, vsize := uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
	if flags&^boltBucketLeaf != 0 {
		return 0, fmt.Errorf("unknown flags %#x", flags)
	}
	if ksize == 0 || at+pos+ksize+vsize > size {
		return 0, errors.New("key or value lies outside the page")
	}
	if flags&boltBucketLeaf == 0 {
		return 0, nil
	}
	if vsize < boltBucketSize {
		return 0, errors.New("bucket header too short")
	}
	v, err := read(at+pos+ksize, vsize)
	if err != nil {
		return 0, err
	}
	if root := ne.Uint64(v); root != 0 {
		return root, nil
	}
	// An inline bucket: its leaf page follows the header in the value.
	p := v[boltBucketSize:]
	if len(p) < boltPageHeader {
		return 0, errors.New("inline bucket too short")
	}
	if f := ne.Uint16(p[8:]); f != boltLeafPage {
		return 0, fmt.Errorf("inline bucket page has type %#x", f)
	}
	count := uint64(ne.Uint16(p[10:]))
	if boltPageHeader+count*boltElementSize > uint64(len(p)) {
		return 0, fmt.Errorf("inline bucket counts %d elements, more than it holds", count)
	}
	for i := uint64(0); i < count; i++ {
		at := boltPageHeader + i*boltElementSize
		e := p[at:]
		// bbolt keeps a bucket inline only when it holds no buckets.
		if ne.Uint32(e[0:]) != 0 {
			return 0, fmt.Errorf("inline bucket element %d has flags %#x", i, ne.Uint32(e[0:]))
		}
		if _, err := bf.checkLeafElement(e, at, uint64(len(p)), nil); err != nil {
			return 0, fmt.Errorf("inline bucket element %d: %w", i, err)
		}
	}
	return 0, nil
}
