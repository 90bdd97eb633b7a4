"""What the protobuf kernels report: statuses of ``decode_chunk``, error codes and the columns of the error
table, slots of the state array the decoding functions share, kinds of declared features."""

# status of decode_chunk
DONE = 0
FULL = 1  # scratch full: a block of what was decoded, then call again
STOPPED_AT_ERROR = 2  # stop_on_error and a bad record: records before it were kept
UNFRAMED = 3  # a record length that cannot be trusted: the rest of the input is lost

# error codes
TRUNCATED = 1
TOO_LONG = 2
MALFORMED = 3
WRONG_WIRE_TYPE = 4
MISSING_REQUIRED = 5
MISSING_KEY = 6
TYPE_MISMATCH = 7
DENSE_VALUES = 8
DENSE_WIDTH = 9
DENSE_REPEATED = 10
TOO_FEW_LABELS = 11
LINE_COUNT = 12
SAMPLE_ID_COUNT = 13
BAD_REFER = 14
BAD_TIMESTAMP = 15
BAD_ENUM = 16

# columns of the error table
E_CODE = 0
E_RECORD = 1  # record index within the chunk
E_RECORD_POS = 2  # buffer position of the record's length prefix
E_POS = 3  # buffer position of the offending bytes
E_TABLE = 4
E_LINE = 5  # line within the group's table
E_FEATURE = 6  # declared feature (index in the name table) or -1
E_GOT = 7  # the count or value found
ERROR_COLUMNS = 8

# slots of the state array shared by the decoding functions
S_FULL_FEATURE = 0  # the sparse feature whose region a FULL status ran out of, or -1
S_NSID = 1
S_NROWS = 2
S_NGROUPS = 3
S_ANY_HKEY = 4
S_POS = 5
S_TABLE = 6
S_LINE = 7
S_FEATURE = 8
S_GOT = 9
STATE_SLOTS = 10

REGION_FULL = -2  # _decode_record: a value found its feature's region full (rolled back, status FULL)

# kinds of declared features
SPARSE = 0
DENSE = 1
