//! Synthetic interchanges for benchmarks, property tests and load tests: realistic INVOIC, ORDERS
//! and DESADV messages, deterministic by seed (the same seed always gives the same bytes).

use std::fmt::Write;

/// A small deterministic generator (xorshift64*); no cryptographic claims.
#[derive(Debug, Clone)]
pub struct Synth {
    state: u64,
}

/// How an interchange is laid out in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Precede the UNB with `UNA:+.? '`.
    pub una: bool,
    /// End each segment with CRLF (otherwise nothing).
    pub crlf: bool,
    /// Put the messages in one UNG/UNE group.
    pub group: bool,
}

impl Synth {
    pub fn new(seed: u64) -> Self {
        Synth {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A layout chosen at random: about half with UNA, a third with CRLF, a fifth grouped.
    pub fn layout(&mut self) -> Layout {
        Layout {
            una: self.chance(50),
            crlf: self.chance(33),
            group: self.chance(20),
        }
    }

    /// One interchange with `messages` messages between `sender` and `recipient`.
    pub fn interchange(
        &mut self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
        messages: usize,
        layout: Layout,
    ) -> Vec<u8> {
        let mut segs: Vec<String> = Vec::new();
        let day = 1 + self.below(28);
        segs.push(format!(
            "UNB+UNOC:3+{sender}:14+{recipient}:14+2403{day:02}:{:02}{:02}+{control_ref}",
            self.below(24),
            self.below(60)
        ));
        if layout.group {
            segs.push(format!(
                "UNG+INVOIC+{sender}:14+{recipient}:14+2403{day:02}:1200+G1+UN+D:96A"
            ));
        }
        for n in 1..=messages {
            let start = segs.len();
            let kind = self.below(3);
            let (name, version) = match kind {
                0 => ("INVOIC", "96A"),
                1 => ("ORDERS", "01B"),
                _ => ("DESADV", "07A"),
            };
            segs.push(format!("UNH+{n}+{name}:D:{version}:UN:EAN008"));
            self.body(&mut segs, kind, n);
            let count = segs.len() - start + 1;
            segs.push(format!("UNT+{count}+{n}"));
        }
        if layout.group {
            segs.push(format!("UNE+{messages}+G1"));
        }
        let count = if layout.group { 1 } else { messages };
        segs.push(format!("UNZ+{count}+{control_ref}"));
        let mut out = String::new();
        if layout.una {
            out.push_str("UNA:+.? '");
            if layout.crlf {
                out.push_str("\r\n");
            }
        }
        for s in segs {
            out.push_str(&s);
            out.push('\'');
            if layout.crlf {
                out.push_str("\r\n");
            }
        }
        out.into_bytes()
    }

    /// One ANSI X12 interchange (00401, `*` `>` `~`) of one group `PO` with `sets` 850
    /// purchase orders between `sender` and `receiver` (ISA06, ISA08, at most 15 bytes), ISA13
    /// `control`; a line break after each segment where `crlf`.
    pub fn x12_interchange(
        &mut self,
        sender: &str,
        receiver: &str,
        control: u64,
        sets: usize,
        crlf: bool,
    ) -> Vec<u8> {
        let day = 1 + self.below(28);
        let (hh, mm) = (self.below(24), self.below(60));
        let mut segs = vec![
            format!(
                "ISA*00*          *00*          *ZZ*{sender:<15}*ZZ*{receiver:<15}*2403{day:02}*{hh:02}{mm:02}*U*00401*{control:09}*0*P*>"
            ),
            format!("GS*PO*{sender}*{receiver}*202403{day:02}*{hh:02}{mm:02}*1*X*004010"),
        ];
        for n in 1..=sets {
            let start = segs.len();
            segs.push(format!("ST*850*{n:04}"));
            segs.push(format!(
                "BEG*00*SA*PO{:08}**202403{day:02}",
                self.below(100_000_000)
            ));
            segs.push(format!("N1*ST*Store {}*92*{:04}", n, self.below(10_000)));
            let lines = 1 + self.below(20);
            for line in 1..=lines {
                let cents = 50 + self.below(20_000);
                segs.push(format!(
                    "PO1*{line}*{}*EA*{}.{:02}**VN*ART-{:06}>BLUE",
                    1 + self.below(500),
                    cents / 100,
                    cents % 100,
                    self.below(1_000_000)
                ));
            }
            segs.push(format!("CTT*{lines}"));
            // SE01 counts ST through SE.
            let count = segs.len() - start + 1;
            segs.push(format!("SE*{count}*{n:04}"));
        }
        segs.push(format!("GE*{sets}*1"));
        segs.push(format!("IEA*1*{control:09}"));
        let mut out = String::new();
        for s in segs {
            out.push_str(&s);
            out.push('~');
            if crlf {
                out.push_str("\r\n");
            }
        }
        out.into_bytes()
    }

    fn body(&mut self, segs: &mut Vec<String>, kind: u64, n: usize) {
        let doc = 380 + kind * 10;
        segs.push(format!("BGM+{doc}+DOC{:08}+9", self.below(100_000_000)));
        segs.push(format!("DTM+137:202403{:02}:102", 1 + self.below(28)));
        segs.push(format!("RFF+ON:PO{:06}", self.below(1_000_000)));
        segs.push(format!(
            "NAD+SU+{:013}::9++Supplier {n} GmbH+Industriestra?+e {}+Stuttgart++70173+DE",
            self.below(10_000_000_000_000),
            1 + self.below(200)
        ));
        segs.push(format!("NAD+BY+{:013}::9", self.below(10_000_000_000_000)));
        segs.push("CUX+2:EUR:4".to_string());
        let items = 1 + self.below(20);
        let mut total = 0u64;
        for line in 1..=items {
            let qty = 1 + self.below(500);
            let cents = 50 + self.below(20_000);
            total += qty * cents;
            segs.push(format!(
                "LIN+{line}++{:013}:SRS",
                self.below(10_000_000_000_000)
            ));
            segs.push(format!("IMD+F++:::Article {line} colour?:blue size 42"));
            segs.push(format!("QTY+47:{qty}:PCE"));
            let mut moa = String::new();
            let _ = write!(
                moa,
                "MOA+203:{}.{:02}",
                qty * cents / 100,
                qty * cents % 100
            );
            segs.push(moa);
            segs.push(format!("PRI+AAA:{}.{:02}", cents / 100, cents % 100));
        }
        segs.push("UNS+S".to_string());
        segs.push(format!("MOA+77:{}.{:02}", total / 100, total % 100));
        segs.push("TAX+7+VAT+++:::19+S".to_string());
    }
}

/// The inputs of the parser benchmark (`benches/parser.rs`), also parsed by
/// `examples/parse_file.rs` when it is given no file: one interchange of 10,000 messages with
/// a UNA and CRLF after each segment, and 2,000 small ones of 1 to 3 messages in mixed layouts.
pub fn parser_bench_inputs() -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut g = Synth::new(42);
    let large = g.interchange(
        "5412345000013",
        "4012345000023",
        "LARGE1",
        10_000,
        Layout {
            una: true,
            crlf: true,
            group: false,
        },
    );
    let small = (0..2_000)
        .map(|n| {
            let layout = g.layout();
            let messages = 1 + g.below(3) as usize;
            g.interchange("SENDER", "RECIPIENT", &format!("S{n:06}"), messages, layout)
        })
        .collect();
    (large, small)
}

/// `n` distinct interchange files `m000.edi`, ... in `dir` (made), GW to HUB, their control
/// references `{prefix}{seed}N{k}`: the paths.
pub fn interchange_files(dir: &std::path::Path, n: usize, seed: u64, prefix: &str) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut s = Synth::new(seed);
    (0..n)
        .map(|k| {
            let path = dir.join(format!("m{k:03}.edi"));
            std::fs::write(
                &path,
                s.interchange(
                    "GW",
                    "HUB",
                    &format!("{prefix}{seed}N{k}"),
                    1,
                    Layout::default(),
                ),
            )
            .unwrap();
            path.display().to_string()
        })
        .collect()
}
