//! The read-ahead's byte budget: how much of the files read ahead and not yet decided may be in
//! memory at once.

/// At most this many bytes of files read ahead and not yet decided (the file the deciding thread
/// needs next is read even beyond it, so memory stays within this plus one file).
pub(super) const IN_FLIGHT_BYTES: usize = 64 << 20;

/// Bytes read ahead and not yet decided, bounded.
///
/// A file takes room before it is read, so the bound holds for what is in memory, not only for
/// what was handed over. The file the deciding thread needs next always gets through, room or
/// not: it waits for no other file, and every file before it has been decided and given its room
/// back. (Without that, a later small file could take the room that an earlier large one waited
/// for while the deciding thread waited for the large one: a deadlock, at 0% CPU, with the
/// batch's write lock held.) So memory stays within the budget plus one file, and a file larger
/// than the budget is admitted only once it is needed. Admitting files strictly in their order would do too, but
/// ties the readers to each other's pace: 11% slower on 20,000 files.
pub(super) struct Budget {
    state: std::sync::Mutex<BudgetState>,
    room: std::sync::Condvar,
    cap: usize,
}

struct BudgetState {
    in_flight: usize,
    /// The index of the file the deciding thread waits for (or decides) now.
    needed: usize,
    closed: bool,
}

impl Budget {
    pub(super) fn new(cap: usize) -> Self {
        Budget {
            state: std::sync::Mutex::new(BudgetState {
                in_flight: 0,
                needed: 0,
                closed: false,
            }),
            room: std::sync::Condvar::new(),
            cap,
        }
    }

    /// Waits for room for `bytes` of file `n` (or for `n` to be the file the deciding thread
    /// needs: a file larger than the budget is admitted only then), then takes it. False
    /// once the deciding thread has gone.
    pub(super) fn admit(&self, n: usize, bytes: usize) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        while !s.closed && bytes > 0 && n > s.needed && s.in_flight + bytes > self.cap {
            s = match self.room.wait(s) {
                Ok(s) => s,
                Err(_) => return false,
            };
        }
        s.in_flight += bytes;
        !s.closed
    }

    /// The deciding thread now waits for file `n`.
    pub(super) fn needed(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.needed = n;
        }
        self.room.notify_all();
    }

    /// Gives back `taken - kept` bytes of an admitted file: it needed less than was set aside.
    pub(super) fn settle(&self, taken: usize, kept: usize) {
        if kept < taken {
            self.release(taken - kept);
        } else if let Ok(mut s) = self.state.lock() {
            s.in_flight += kept - taken;
        }
    }

    pub(super) fn release(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.in_flight = s.in_flight.saturating_sub(n);
        }
        self.room.notify_all();
    }

    fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.room.notify_all();
    }
}

pub(super) struct CloseOnDrop<'a>(pub(super) &'a Budget);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}
